package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/agent/internal/capacity/nvmltest"
)

// Measuring creates nothing: before the first run made the work
// directory, free disk is measured at the nearest directory above it.
func TestMeasuringCreatesNoDirectory(t *testing.T) {
	root := t.TempDir()
	work := filepath.Join(root, "state", "work")
	lib, _ := nvmltest.XIDServer()
	measure := func() string {
		c := newCollector(Config{WorkDir: work, NVML: lib}, nil)
		defer c.GPUs.Close()
		_, err := c.Measure()
		require.NoError(t, err)
		return c.Host.WorkDir
	}
	require.Equal(t, root, measure())
	require.NoDirExists(t, filepath.Join(root, "state"))
	require.NoError(t, os.MkdirAll(work, 0o700))
	require.Equal(t, work, measure())
}

// A directory the agent writes that another user owns is named, with its
// owner and the command that gives it back; a missing one is made.
func TestDirectoriesTheAgentWritesAreItsOwn(t *testing.T) {
	root := t.TempDir()
	work := filepath.Join(root, "work")
	require.NoError(t, ownDirs(work, filepath.Join(work, "logs")))
	require.DirExists(t, filepath.Join(work, "logs"))
	if os.Getuid() != 0 {
		t.Skip("giving a directory to another user needs root")
	}
	require.NoError(t, os.Chown(filepath.Join(work, "logs"), 4242, 4242))
	err := ownDirs(work, filepath.Join(work, "logs"))
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{filepath.Join(work, "logs") + " is owned by uid 4242, not by root", "chown -R root:root " + filepath.Join(work, "logs"), "systemd-tmpfiles --create runmesh-agent.conf"} {
		require.True(t, strings.Contains(msg, want), "%q lacks %q", msg, want)
	}
}
