package runnerapi

// Stdio is how a job's standard streams are wired: one mode, so that a
// job cannot be both batch and interactive.
type Stdio string

const (
	// StdioLogs (the zero value, and so left out of a lease): the job's
	// output goes to the server's log store, and nothing goes in. Every job
	// but an interactive one.
	StdioLogs Stdio = ""
	// StdioTTY: an interactive job whose process has a pseudo-terminal.
	StdioTTY Stdio = "TTY"
	// StdioPipe: an interactive job whose process reads and writes raw
	// bytes (no line discipline).
	StdioPipe Stdio = "PIPE"
)

// Interactive reports whether s is TTY or PIPE: the job's bytes are never
// stored, on the server or in podman's log on the runner.
func (s Stdio) Interactive() bool { return s == StdioTTY || s == StdioPipe }

// Valid reports whether s is a mode: LOGS, TTY or PIPE.
func (s Stdio) Valid() bool { return s == StdioLogs || s.Interactive() }

// Bounds of an interactive job's idle timeout (seconds without a byte in
// either direction): a minute to a week.
const (
	MinIdleTimeoutSeconds = 60
	MaxIdleTimeoutSeconds = 7 * 24 * 3600
)
