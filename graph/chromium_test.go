package graph_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runmesh/runmesh/internal/testutil"
	"github.com/stretchr/testify/require"
)

// startChromium starts a headless chromium of its own profile, killed at
// the test's end, and returns its DevTools address.
func startChromium(ctx context.Context, t *testing.T) string {
	t.Helper()
	profile, err := os.MkdirTemp("", "runmesh-chromium-")
	require.NoError(t, err)
	// Not bound to ctx: a test out of time still asks the page what it
	// shows; the cleanup ends chromium. Containers' /dev/shm is often too
	// small for it, hence --disable-dev-shm-usage.
	cmd := exec.Command(chromiumPath, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--window-size=1400,900", "--remote-debugging-port=0",
		"--user-data-dir="+profile, "about:blank")
	// A process group of its own: chromium's helpers (renderer, crashpad)
	// still write to the profile after the browser process is gone, so
	// the whole group is killed and the profile removed after it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if err := testutil.Within(5*time.Second, func() bool { return os.RemoveAll(profile) == nil }); err != nil {
			t.Errorf("chromium's profile %s could not be removed: %v", profile, err)
		}
	})
	found := make(chan string, 1)
	var mu sync.Mutex
	var said strings.Builder
	go func() {
		listening := regexp.MustCompile(`DevTools listening on (ws://\S+)`)
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			if m := listening.FindStringSubmatch(s.Text()); m != nil {
				found <- m[1]
			}
			mu.Lock()
			said.WriteString(s.Text() + "\n")
			mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case addr := <-found:
		return addr
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("chromium did not say where DevTools listen: %v\n%s", ctx.Err(), said.String())
		return ""
	}
}
