package runnerapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// The modes: LOGS is the zero value; TTY and PIPE are interactive; nothing
// else is a mode (not even "LOGS" spelled out: the wire leaves it out).
func TestStdioModes(t *testing.T) {
	for s, want := range map[Stdio][2]bool{ // valid, interactive
		StdioLogs: {true, false}, StdioTTY: {true, true}, StdioPipe: {true, true},
		"LOGS": {false, false}, "tty": {false, false}, "RAW": {false, false},
	} {
		if got := [2]bool{s.Valid(), s.Interactive()}; got != want {
			t.Errorf("%q: valid, interactive = %v, want %v", s, got, want)
		}
	}
}

// A batch job's lease, and a request for work that names no interactive
// mode, read on the wire as they did before interactive jobs: an older
// agent or server sees nothing it does not know.
func TestABatchLeaseReadsAsBefore(t *testing.T) {
	for name, v := range map[string]any{
		"lease":   Lease{LeaseID: "l", Attempt: 1, Image: "busybox"},
		"request": LeaseRequest{Kinds: []string{"default"}, Max: 1},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "stdio") || strings.Contains(string(b), "idle_timeout") {
			t.Errorf("%s: %s", name, b)
		}
	}
	b, err := json.Marshal(Lease{Stdio: StdioTTY, IdleTimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"stdio":"TTY"`) || !strings.Contains(string(b), `"idle_timeout_seconds":600`) {
		t.Errorf("an interactive lease: %s", b)
	}
}
