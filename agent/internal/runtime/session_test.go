package runtime_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runmesh/runmesh/agent/internal/runtime"
	"github.com/runmesh/runmesh/internal/testutil"
	"github.com/runmesh/runmesh/runnerapi"
)

// buffer is an io.Writer the test reads while the session writes.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// running starts an interactive job and waits for its container.
func running(t *testing.T, r *runtime.Local, mode runnerapi.Stdio, cmd ...string) (runtime.Spec, runtime.Unit) {
	t.Helper()
	j := jobSpec(cmd...)
	j.Stdio = mode
	u := start(t, r, j)
	testutil.Eventually(t, 60*time.Second, func() bool { return containers(t, j.LeaseID) != "" }, "its container")
	t.Cleanup(func() {
		_ = r.Stop(context.Background(), u.Name)
		_ = r.Forget(context.Background(), u.Name)
	})
	return j, u
}

// A person attached to a TTY job types into its shell, resizes the
// terminal and sees the new size; detaching (ctx) leaves the job running.
func TestAttachToATTYJob(t *testing.T) {
	r := local(t)
	_, u := running(t, r, runnerapi.StdioTTY, "sh")
	stdin, typing := io.Pipe()
	out := &buffer{}
	resize := make(chan runnerapi.Size, 1)
	ctx, detach := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- r.Attach(ctx, u.Container(), true, runtime.SessionIO{Stdin: stdin, Stdout: out, Resize: resize})
	}()
	resize <- runnerapi.Size{Cols: 101, Rows: 31}
	time.Sleep(500 * time.Millisecond) // the resize reaches the terminal
	if _, err := io.WriteString(typing, "stty size; echo at-$((6*7))\r"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(out.String(), "31 101") && strings.Contains(out.String(), "at-42")
	},
		"the shell's answer (so far %q)", out)
	detach()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("attach ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("attach did not end when the session did")
	}
	if s, err := r.Status(context.Background(), u.Name); err != nil || s.Ended {
		t.Fatalf("after a detach the job is %+v (%v), want running", s, err)
	}
}

// A PIPE job's bytes pass unchanged both ways, and the end of the input
// reaches the process.
func TestAttachToAPipeJob(t *testing.T) {
	r := local(t)
	_, u := running(t, r, runnerapi.StdioPipe, "cat")
	payload := make([]byte, 256<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	out, errs := &buffer{}, &buffer{}
	err := r.Attach(context.Background(), u.Container(), false, runtime.SessionIO{Stdin: bytes.NewReader(payload), Stdout: out, Stderr: errs})
	if err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != string(payload) {
		t.Fatalf("%d bytes back of %d (first difference matters)", len(got), len(payload))
	}
	waitEnded(t, r, u.Name)
}

// exec runs beside the job: its streams apart, its exit status returned.
func TestExecInARunningJob(t *testing.T) {
	r := local(t)
	_, u := running(t, r, runnerapi.StdioLogs, "sleep", "300")
	out, errs := &buffer{}, &buffer{}
	code, err := r.Exec(context.Background(), u.Container(), []string{"sh", "-c", "read x; echo got-$x; echo oops >&2; exit 3"}, false, runnerapi.Size{},
		runtime.SessionIO{Stdin: strings.NewReader("hello\n"), Stdout: out, Stderr: errs})
	if err != nil || code != 3 {
		t.Fatalf("exec: %d, %v", code, err)
	}
	if out.String() != "got-hello\n" || errs.String() != "oops\n" {
		t.Fatalf("stdout %q, stderr %q", out, errs)
	}
	// A command the container lacks: podman's 127, or its refusal.
	code, err = r.Exec(context.Background(), u.Container(), []string{"/no/such/thing"}, false, runnerapi.Size{}, runtime.SessionIO{Stdout: out, Stderr: errs})
	t.Logf("a missing command: %d, %v", code, err)
	if err == nil && code != 127 {
		t.Fatalf("a missing command exited %d", code)
	}
}
