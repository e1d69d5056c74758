package runtime

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/runmesh/runmesh/runnerapi"
)

// A person who joins sees the last ReplayBytes of output first, then
// what comes after, in order; older output nobody read is gone.
func TestATerminalReplaysTheRecentScreen(t *testing.T) {
	term := NewTerminal(runnerapi.StdioTTY)
	out := output{term, false}
	old := strings.Repeat("o", ReplayBytes)
	out.Write([]byte("first-never-seen"))
	out.Write([]byte(old[:ReplayBytes-10]))
	out.Write([]byte("0123456789abcdef"))
	var seen bytes.Buffer
	s, err := term.Join(&seen, nil)
	if err != nil {
		t.Fatal(err)
	}
	out.Write([]byte("live"))
	got := seen.String()
	if len(got) != ReplayBytes+4 || strings.Contains(got, "first") || !strings.HasSuffix(got, "0123456789abcdeflive") {
		t.Fatalf("joined and saw %d bytes ending %q", len(got), got[max(0, len(got)-40):])
	}
	s.Leave()
	out.Write([]byte("after"))
	if strings.Contains(seen.String(), "after") {
		t.Fatal("output reached a viewer that left")
	}
}

// Input and output both count as activity; the idle clock does not move
// without either.
func TestATerminalsIdleClock(t *testing.T) {
	term := NewTerminal(runnerapi.StdioPipe)
	start := term.IdleSince()
	time.Sleep(20 * time.Millisecond)
	if term.IdleSince() != start {
		t.Fatal("the idle clock moved with no byte")
	}
	output{term, true}.Write([]byte("x"))
	afterOut := term.IdleSince()
	if !afterOut.After(start) {
		t.Fatal("output did not count")
	}
	s, _ := term.Join(io.Discard, io.Discard)
	go io.Copy(io.Discard, term.stdinR)
	time.Sleep(20 * time.Millisecond)
	if err := s.Input([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if !term.IdleSince().After(afterOut) {
		t.Fatal("input did not count")
	}
	term.Close()
	select {
	case <-term.Done():
	default:
		t.Fatal("not done once closed")
	}
	if _, err := term.Join(io.Discard, nil); err == nil {
		t.Fatal("joined a closed terminal")
	}
}
