package jobunit_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/runmesh/runmesh/agent/jobunit"
)

// TestRenderedUnitRunsInTheUserManager starts a rendered unit in the
// runmesh user's systemd manager and checks what the agent relies on: the
// unit's ExecMainStatus is the container's exit code, the environment
// file reaches the container, and ExecStopPost removes that file. It runs
// inside agent/sandbox (make test-e2e), where RUNMESH_SANDBOX is set.
func TestRenderedUnitRunsInTheUserManager(t *testing.T) {
	if os.Getenv("RUNMESH_SANDBOX") == "" {
		t.Skip("runs inside agent/sandbox (make test-e2e)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	envDir := filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "runmesh")
	if err := os.MkdirAll(envDir, 0o700); err != nil {
		t.Fatal(err)
	}
	facts, err := jobunit.ProbePodman(ctx, "/usr/bin/podman")
	if err != nil {
		t.Fatal(err)
	}
	host := jobunit.Host{Podman: "/usr/bin/podman", Cgroup: facts.Cgroup(), Enforce: jobunit.DetectEnforcement(facts), EnvDir: envDir, LogDir: filepath.Join(os.Getenv("HOME"), "logs")}
	t.Logf("podman: %+v; enforcement: %+v", facts, host.Enforce)
	j := job()
	j.Image = "localhost/busybox:latest"
	// ${API_KEY} as one word is what systemd would expand from its own
	// environment if the unit did not escape it.
	j.Command = []string{"sh", "-c", `test ${API_KEY} = s3cret-value && exit 3; exit 1`}
	j.MemoryMiB = 0
	u, err := jobunit.Render(host, j)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(u.EnvPath, u.EnvFile, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(host.LogDir, 0o700); err != nil {
		t.Fatal(err)
	}
	props, err := u.DBus()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := sddbus.NewUserConnectionContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, u.Name, "fail", props, done); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r != "done" {
		t.Fatalf("start: %s", r)
	}
	var status any
	for {
		p, err := conn.GetUnitTypePropertiesContext(ctx, u.Name, "Service")
		if err != nil {
			t.Fatal(err)
		}
		if p["ExecMainCode"].(int32) != 0 {
			state, _ := conn.GetUnitPropertyContext(ctx, u.Name, "ActiveState")
			t.Logf("ended: ActiveState=%v Result=%v ExecMainCode=%v", state.Value, p["Result"], p["ExecMainCode"])
			status = p["ExecMainStatus"]
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the job did not end")
		case <-time.After(100 * time.Millisecond):
		}
	}
	if status != int32(3) {
		t.Fatalf("ExecMainStatus = %v, want the container's exit code 3", status)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(u.EnvPath); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still there after the unit stopped", u.EnvPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = conn.ResetFailedUnitContext(ctx, u.Name)
}
