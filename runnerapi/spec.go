package runnerapi

import (
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// What an agent can run, checked alike by the server when a job is
// submitted (a job no agent would run is refused there, not queued) and by
// the agent before it runs one.

// CheckImage refuses an image reference podman would read as something
// else (an option) or that cannot travel (control characters, invalid
// UTF-8).
func CheckImage(image string) error {
	switch {
	case strings.TrimSpace(image) == "" || len(image) > 512:
		return fmt.Errorf("image: 1 to 512 characters")
	case strings.HasPrefix(image, "-"):
		return fmt.Errorf("image %q would be read as an option", image)
	case hasControl(image) || strings.ContainsRune(image, ' '):
		return fmt.Errorf("image: no spaces or control characters")
	}
	return nil
}

// CheckArg refuses a command argument no process can be given: NUL ends
// an argument, and PostgreSQL stores no invalid UTF-8.
func CheckArg(a string) error {
	if strings.ContainsRune(a, 0) || !utf8.ValidString(a) {
		return fmt.Errorf("a NUL or invalid UTF-8")
	}
	return nil
}

// MaxEnvName bounds an environment variable's name.
const MaxEnvName = 128

// ValidEnvName: a portable environment name, at most MaxEnvName bytes.
// (podman reads NAME* as a prefix to copy from its own environment, which
// a job must never reach.)
func ValidEnvName(s string) bool {
	if s == "" || len(s) > MaxEnvName {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// CheckEnvValue refuses a value podman's env file cannot carry as it is:
// the format has no escapes, so a line break or NUL would end it, and
// podman 5 reads a quoted value as quoted where podman 4 keeps the quotes.
func CheckEnvValue(v string) error {
	switch {
	case strings.ContainsAny(v, "\n\r\x00"):
		return fmt.Errorf("has a line break or NUL, which podman's env file cannot carry")
	case strings.HasPrefix(v, `"`) || strings.HasPrefix(v, "'"):
		return fmt.Errorf("starts with a quote, which podman versions read differently")
	case !utf8.ValidString(v):
		return fmt.Errorf("is not valid UTF-8")
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return true
		}
	}
	return false
}

// MaxWorkingDir bounds a job's working directory.
const MaxWorkingDir = 1024

// CheckWorkingDir refuses a working directory podman would not take as
// given: one that is not absolute or not clean (no "..", no "//", no
// trailing slash), too long, or that holds a control character.
func CheckWorkingDir(dir string) error {
	switch {
	case len(dir) > MaxWorkingDir:
		return fmt.Errorf("longer than %d bytes", MaxWorkingDir)
	case !utf8.ValidString(dir) || strings.IndexFunc(dir, unicode.IsControl) >= 0:
		return fmt.Errorf("a control character or invalid UTF-8")
	case !strings.HasPrefix(dir, "/") || path.Clean(dir) != dir:
		return fmt.Errorf("%q is not a clean absolute path", dir)
	}
	return nil
}
