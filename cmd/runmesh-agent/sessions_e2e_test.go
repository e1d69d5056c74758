package main_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
)

// tmux is a real terminal: a detached tmux server of the test's own, one
// window running a command.
type tmux struct {
	t      *testing.T
	socket string
}

func newTmux(t *testing.T, cols, rows int, command string) tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("the interactive tests drive a real terminal: apt-get install tmux")
	}
	// A short path: a unix socket's is bounded (108 bytes), and a
	// subtest's TempDir is named after it.
	dir, err := os.MkdirTemp("", "tmux")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	m := tmux{t: t, socket: filepath.Join(dir, "sock")}
	m.must("new-session", "-d", "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), "sh", "-c", command)
	m.must("set-option", "-g", "window-size", "manual")
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", m.socket, "kill-server").Run() })
	return m
}

// statusTo ends a terminal's command line: the status of what ran before
// it, written to file whole (the test reads it once it exists), then the
// terminal stays open to be read.
func statusTo(file string) string {
	return "; echo $? >" + shq(file+".tmp") + " && mv " + shq(file+".tmp") + " " + shq(file) + "; sleep 600"
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (m tmux) must(args ...string) string {
	m.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", m.socket}, args...)...).CombinedOutput()
	require.NoError(m.t, err, "tmux %v: %s", args, out)
	return string(out)
}

// screen is what the terminal shows now.
func (m tmux) screen() string { return m.must("capture-pane", "-p", "-J") }

// waitFor waits until the screen shows s.
func (m tmux) waitFor(s string, within time.Duration) {
	m.t.Helper()
	e2e.Eventually(m.t, within, "the terminal to show "+s, func() bool { return strings.Contains(m.screen(), s) })
}

// TestSessionsInTheSandbox attaches to and execs in jobs run by the real
// agent in the sandbox, through the real server, from a real terminal
// (tmux): the CLI's raw mode, its size and a resize reach the job's
// terminal; ctrl-p ctrl-q detaches and the job runs on; the job's exit
// status is attach's own; exec's streams and status; each session audited,
// none of its bytes stored.
func TestSessionsInTheSandbox(t *testing.T) {
	sb, serverBin, cliBin, agentBin := sandboxTest(t, "runmesh-agent")
	srv := e2e.StartDev(t, serverBin)
	poolID := srv.GraphQL(t, `{ pools { id } }`, nil)["pools"].([]any)[0].(map[string]any)["id"]
	sb.installAgent(t, srv, cliBin, agentBin, "sandbox-01", "metrics:\n  listen: \"off\"\n")
	sb.must("exec", "systemctl", "start", "runmesh-agent")

	submit := func(stdio string, idle int, command ...string) string {
		t.Helper()
		in := map[string]any{"poolId": poolID, "image": "localhost/busybox:latest", "command": command,
			"claim": map[string]any{"cores": 0.5, "wallClockSeconds": 600}}
		if stdio != "" {
			in["stdio"] = stdio
		}
		if idle > 0 {
			in["idleTimeoutSeconds"] = idle
		}
		return srv.GraphQL(t, `mutation($in: SubmitJobInput!) { submitJob(input: $in) { id } }`, map[string]any{"in": in})["submitJob"].(map[string]any)["id"].(string)
	}
	state := func(id string) string {
		return srv.GraphQL(t, `query($id: ID!) { job(id: $id) { state } }`, map[string]any{"id": id})["job"].(map[string]any)["state"].(string)
	}
	waitState := func(id, want string) {
		t.Helper()
		e2e.Eventually(t, 90*time.Second, "job "+id+" "+want, func() bool { return state(id) == want })
	}
	cli := shq(cliBin) + " --env-file " + shq(srv.EnvFile)

	// A PIPE job nobody speaks to, bound to a minute idle: the shortest
	// bound there is, so it runs beside the rest of the test.
	idle := submit("PIPE", 60, "cat")
	idleSince := time.Now()
	shell := submit("TTY", 0, "sh")
	waitState(shell, "RUNNING")

	t.Run("attach from a terminal: its size, a resize, a detach", func(t *testing.T) {
		done := filepath.Join(t.TempDir(), "done")
		term := newTmux(t, 120, 40, cli+" attach "+shell+statusTo(done))
		// The agent's stream stands once the job runs; the shell prompts
		// once a key reaches it.
		e2e.Eventually(t, 20*time.Second, "the shell to answer", func() bool {
			term.must("send-keys", "echo ready-$((6*7))", "Enter")
			time.Sleep(300 * time.Millisecond)
			return strings.Contains(term.screen(), "ready-42")
		})
		term.must("send-keys", "stty size", "Enter")
		term.waitFor("40 120", 10*time.Second)
		term.must("resize-window", "-x", "90", "-y", "25")
		time.Sleep(500 * time.Millisecond)
		term.must("send-keys", "clear; stty size", "Enter")
		term.waitFor("25 90", 10*time.Second)
		term.must("send-keys", "C-p", "C-q")
		e2e.Eventually(t, 10*time.Second, "attach to end", func() bool { _, err := os.Stat(done); return err == nil })
		b, _ := os.ReadFile(done)
		require.Equal(t, "0\n", string(b), "a detach exits 0")
		require.Contains(t, term.screen(), "detached from job")
		require.Equal(t, "RUNNING", state(shell), "the job runs on after a detach")
	})

	t.Run("exec beside the job: its streams and exit status", func(t *testing.T) {
		out, err := e2e.Run(t, nil, "sh", "-c", "echo 5 | "+cli+" exec -i "+shell+" -- sh -c 'read x; echo out-$x; echo err >&2; exit 4'")
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "exec's status is the command's: %s", out)
		require.Equal(t, 4, exit.ExitCode(), out)
		require.Contains(t, out, "out-5")
		require.Contains(t, out, "err")
	})

	token := func(role string, org any) (id, secret string) {
		in := map[string]any{"name": "e2e-" + strings.ToLower(role) + "-" + strconv.Itoa(int(time.Now().UnixNano()%1e6)), "role": role, "organisationId": org}
		c := srv.GraphQL(t, `mutation($in: CreateAdminTokenInput!) { createAdminToken(input: $in) { token tokenId } }`,
			map[string]any{"in": in})["createAdminToken"].(map[string]any)
		return c["tokenId"].(string), c["token"].(string)
	}
	// as is an env file (the CLI's --env-file) that holds the token: never
	// in a command line.
	as := func(secret string) string {
		f := filepath.Join(t.TempDir(), "admin.env")
		require.NoError(t, os.WriteFile(f, []byte("RUNMESH_ADMIN_URL="+srv.Env["RUNMESH_ADMIN_URL"]+"\nRUNMESH_ADMIN_TOKEN="+secret+"\n"), 0o600))
		return f
	}

	t.Run("another organisation's admin is told there is no such job, and only the refusal is recorded", func(t *testing.T) {
		org := srv.GraphQL(t, `mutation { createOrganisation(input: {name: "elsewhere"}) { id } }`, nil)["createOrganisation"].(map[string]any)["id"]
		_, secret := token("ORG_ADMIN", org)
		out, err := e2e.Run(t, nil, cliBin, "--env-file", as(secret), "exec", shell, "--", "echo", "never-runs")
		require.Error(t, err)
		require.Contains(t, out, "no such job")
		require.NotContains(t, out, "never-runs")
		entries := srv.GraphQL(t, `{ auditLog(action: "jobSession", first: 50) { nodes { outcome actorRole } } }`, nil)["auditLog"].(map[string]any)["nodes"].([]any)
		refused := 0
		for _, e := range entries {
			if e.(map[string]any)["outcome"] == "NOT_FOUND" {
				refused++
				require.Equal(t, "ORG_ADMIN", e.(map[string]any)["actorRole"])
			}
		}
		require.Equal(t, 1, refused, "the refusal, and nothing else, is recorded: %v", entries)
	})

	t.Run("revoking the token ends its session with 4403, the job runs on", func(t *testing.T) {
		id, secret := token("PLATFORM_ADMIN", nil)
		done := filepath.Join(t.TempDir(), "done")
		term := newTmux(t, 80, 24, cliBin+" --env-file "+shq(as(secret))+" attach "+shell+statusTo(done))
		e2e.Eventually(t, 20*time.Second, "the shell to answer", func() bool {
			term.must("send-keys", "echo revoke-$((6*7))", "Enter")
			time.Sleep(300 * time.Millisecond)
			return strings.Contains(term.screen(), "revoke-42")
		})
		srv.GraphQL(t, `mutation($id: ID!) { revokeAdminToken(id: $id) { id } }`, map[string]any{"id": id})
		e2e.Eventually(t, 15*time.Second, "attach to end", func() bool { _, err := os.Stat(done); return err == nil })
		b, _ := os.ReadFile(done)
		require.NotEqual(t, "0\n", string(b), "a revoked session is a failure")
		require.Contains(t, term.screen(), "revoked")
		require.Equal(t, "RUNNING", state(shell))
	})

	t.Run("cp a 64 MiB binary file in and out keeps its bytes and mode; a missing path and a finished job are clear errors", func(t *testing.T) {
		box := submit("", 0, "sleep", "600")
		waitState(box, "RUNNING")
		dir := t.TempDir()
		src := filepath.Join(dir, "blob.bin")
		data := make([]byte, 64<<20)
		_, _ = rand.Read(data)
		require.NoError(t, os.WriteFile(src, data, 0o640))
		want := sha256.Sum256(data)
		e2e.MustRun(t, nil, cliBin, "--env-file", srv.EnvFile, "cp", src, box+":/tmp/")
		back := filepath.Join(dir, "back")
		require.NoError(t, os.Mkdir(back, 0o755))
		e2e.MustRun(t, nil, cliBin, "--env-file", srv.EnvFile, "cp", box+":/tmp/blob.bin", back)
		got, err := os.ReadFile(filepath.Join(back, "blob.bin"))
		require.NoError(t, err)
		require.Equal(t, want, sha256.Sum256(got), "the bytes came back changed")
		fi, err := os.Stat(filepath.Join(back, "blob.bin"))
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
		// Renamed on the way: DST not a directory names the copy.
		e2e.MustRun(t, nil, cliBin, "--env-file", srv.EnvFile, "cp", box+":/tmp/blob.bin", filepath.Join(dir, "renamed.bin"))
		_, err = os.Stat(filepath.Join(dir, "renamed.bin"))
		require.NoError(t, err)

		out, err := e2e.Run(t, nil, cliBin, "--env-file", srv.EnvFile, "cp", box+":/no/such/file", dir)
		require.Error(t, err)
		require.Contains(t, out, "/no/such/file: no such file or directory in the container")
		srv.GraphQL(t, `mutation($id: ID!) { cancelJob(id: $id) { id } }`, map[string]any{"id": box})
		e2e.Eventually(t, 60*time.Second, "the job to end", func() bool { return state(box) == "CANCELLED" })
		out, err = e2e.Run(t, nil, cliBin, "--env-file", srv.EnvFile, "cp", box+":/tmp/blob.bin", dir)
		require.Error(t, err)
		require.Contains(t, out, "not RUNNING")
	})

	t.Run("the job's exit status is attach's own", func(t *testing.T) {
		done := filepath.Join(t.TempDir(), "done")
		term := newTmux(t, 80, 24, cli+" attach "+shell+statusTo(done))
		// The recent screen is replayed: the last session's answer shows
		// before anything is typed.
		term.waitFor("revoke-42", 10*time.Second)
		e2e.Eventually(t, 20*time.Second, "the shell to answer", func() bool {
			term.must("send-keys", "echo again-$((6*7))", "Enter")
			time.Sleep(300 * time.Millisecond)
			return strings.Contains(term.screen(), "again-42")
		})
		term.must("send-keys", "exit 5", "Enter")
		e2e.Eventually(t, 60*time.Second, "attach to end with the job", func() bool { _, err := os.Stat(done); return err == nil })
		b, _ := os.ReadFile(done)
		require.Equal(t, "5\n", string(b), "attach exits with the job's status; the terminal showed:\n%s", term.screen())
		waitState(shell, "FAILED")
	})

	t.Run("each session is audited, none of its bytes stored", func(t *testing.T) {
		entries := srv.GraphQL(t, `{ auditLog(action: "jobSession", first: 50) { nodes { outcome detail actorName } } }`, nil)["auditLog"].(map[string]any)["nodes"].([]any)
		kinds := map[string]int{}
		var maxIn, maxOut float64
		for _, e := range entries {
			e := e.(map[string]any)
			if e["outcome"] != "OK" {
				continue // the refusal above
			}
			var d map[string]any
			require.NoError(t, json.Unmarshal([]byte(e["detail"].(string)), &d))
			kinds[d["kind"].(string)]++
			if d["kind"] == "attach" {
				require.Greater(t, d["bytes_in"].(float64), float64(0), "bytes in: %v", d)
				require.Greater(t, d["bytes_out"].(float64), float64(0), "bytes out: %v", d)
			}
			maxIn, maxOut = max(maxIn, d["bytes_in"].(float64)), max(maxOut, d["bytes_out"].(float64))
		}
		// cp's 64 MiB each way, counted, never kept.
		require.GreaterOrEqual(t, maxIn, float64(64<<20))
		require.GreaterOrEqual(t, maxOut, float64(64<<20))
		require.Equal(t, map[string]int{"attach": 3, "exec": 1, "cp": 4}, kinds, "three attaches, an exec and four copies so far")
		j := srv.GraphQL(t, `query($id: ID!) { job(id: $id) { logs sessions { kind adminName bytesIn bytesOut endedAt endReason command } } }`,
			map[string]any{"id": shell})["job"].(map[string]any)
		require.Empty(t, j["logs"], "an interactive job's bytes are never stored")
		// Job.sessions: the same four, in order, the refused one not among them.
		var got []string
		for _, x := range j["sessions"].([]any) {
			x := x.(map[string]any)
			require.NotNil(t, x["endedAt"])
			require.Greater(t, x["bytesOut"].(float64), float64(0))
			got = append(got, x["kind"].(string)+":"+x["endReason"].(string))
		}
		require.Equal(t, []string{"ATTACH:detached", "EXEC:exited", "ATTACH:revoked", "ATTACH:job_ended"}, got)
	})

	t.Run("run -it: submit, wait for the lease, attach, and the job's status is the command's", func(t *testing.T) {
		done := filepath.Join(t.TempDir(), "done")
		term := newTmux(t, 100, 30, cli+" run -it --cores 0.5 localhost/busybox:latest -- sh"+statusTo(done))
		term.waitFor("attaching", 60*time.Second)
		e2e.Eventually(t, 20*time.Second, "the shell to answer", func() bool {
			term.must("send-keys", "stty size; echo run-$((6*7))", "Enter")
			time.Sleep(300 * time.Millisecond)
			return strings.Contains(term.screen(), "run-42")
		})
		require.Contains(t, term.screen(), "30 100", "the terminal's size from the start")
		term.must("send-keys", "exit 7", "Enter")
		e2e.Eventually(t, 60*time.Second, "run to end with the job", func() bool { _, err := os.Stat(done); return err == nil })
		b, _ := os.ReadFile(done)
		require.Equal(t, "7\n", string(b), "the terminal showed:\n%s", term.screen())
	})

	t.Run("logs -f and events -f follow a job that is still running, to its end", func(t *testing.T) {
		job := submit("", 0, "sh", "-c", "echo one; sleep 4; echo two")
		waitState(job, "RUNNING")
		dir := t.TempDir()
		logs, events := filepath.Join(dir, "logs"), filepath.Join(dir, "events")
		follow := func(out string, args ...string) *exec.Cmd {
			f, err := os.Create(out)
			require.NoError(t, err)
			t.Cleanup(func() { f.Close() })
			c := exec.Command(cliBin, append([]string{"--env-file", srv.EnvFile}, args...)...)
			c.Stdout, c.Stderr = f, f
			require.NoError(t, c.Start())
			return c
		}
		l, e := follow(logs, "logs", "-f", job), follow(events, "events", "-f", job)
		read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }
		e2e.Eventually(t, 10*time.Second, "the first line while the job runs", func() bool { return read(logs) == "one\n" })
		require.Equal(t, "RUNNING", state(job), "seen before the job ended")
		require.Contains(t, read(events), "RUNNING")
		require.NotContains(t, read(events), "SUCCEEDED")
		require.NoError(t, l.Wait(), "logs -f ends with the job: %s", read(logs))
		require.NoError(t, e.Wait(), "events -f ends with the job: %s", read(events))
		require.Equal(t, "one\ntwo\n", read(logs))
		require.Contains(t, read(events), "SUCCEEDED")
	})

	t.Run("an interactive job idle past its bound is stopped, its run ending IDLE", func(t *testing.T) {
		e2e.Eventually(t, 90*time.Second, "the idle job to end", func() bool { return state(idle) != "RUNNING" && state(idle) != "QUEUED" && state(idle) != "LEASED" })
		took := time.Since(idleSince)
		j := srv.GraphQL(t, `query($id: ID!) { job(id: $id) { state stateReason runs { returnReason } } }`, map[string]any{"id": idle})["job"].(map[string]any)
		runs := j["runs"].([]any)
		require.NotEmpty(t, runs)
		reason, _ := runs[len(runs)-1].(map[string]any)["returnReason"].(string)
		require.True(t, strings.HasPrefix(reason, "IDLE"), "the run ended %q (job %v)", reason, j)
		require.GreaterOrEqual(t, took, 60*time.Second, "stopped before its idle timeout")
	})

	// A fresh shell for the faults: the first one has ended.
	faulty := submit("TTY", 0, "sh")
	waitState(faulty, "RUNNING")
	answers := func(term tmux, word string) {
		t.Helper()
		e2e.Eventually(t, 30*time.Second, "the shell to answer", func() bool {
			term.must("send-keys", "echo "+word+"-$((6*7))", "Enter")
			time.Sleep(300 * time.Millisecond)
			return strings.Contains(term.screen(), word+"-42")
		})
	}
	exited := func(done string) string {
		t.Helper()
		e2e.Eventually(t, 30*time.Second, "the CLI to exit", func() bool { _, err := os.Stat(done); return err == nil })
		b, _ := os.ReadFile(done)
		return strings.TrimSpace(string(b))
	}

	t.Run("an agent restart mid-session ends it with its reason; the job runs on, and attaching again works", func(t *testing.T) {
		done := filepath.Join(t.TempDir(), "done")
		term := newTmux(t, 80, 24, cli+" attach "+faulty+statusTo(done))
		answers(term, "before")
		// As an upgrade restarts it: at once, not a drain (docs/operations.md).
		sb.must("exec", "systemctl", "kill", "--kill-whom=main", "--signal=SIGUSR2", "runmesh-agent.service")
		sb.must("exec", "systemctl", "restart", "runmesh-agent.service")
		require.NotEqual(t, "0", exited(done), "a session cut by the agent's restart is a failure")
		require.Contains(t, term.screen(), "agent went away", "the CLI says why")
		require.Equal(t, "RUNNING", state(faulty), "the job's unit survives the agent")
		again := filepath.Join(t.TempDir(), "again")
		term = newTmux(t, 80, 24, cli+" attach "+faulty+statusTo(again))
		answers(term, "after")
		term.must("send-keys", "C-p", "C-q")
		require.Equal(t, "0", exited(again))
	})

	t.Run("attach through another replica on another address; that replica killed mid-session, the CLI says why", func(t *testing.T) {
		// The agent's stream stands on the dev server (127.0.0.1); the
		// person speaks to a second replica on 127.0.0.2, which asks the
		// first for the stream over mutual TLS.
		other := srv.Replica(t, serverBin, "127.0.0.2")
		done := filepath.Join(t.TempDir(), "done")
		term := newTmux(t, 80, 24, shq(cliBin)+" --env-file "+shq(other.EnvFile)+" attach "+faulty+statusTo(done))
		answers(term, "across")
		term.must("send-keys", "stty size", "Enter")
		term.waitFor("24 80", 10*time.Second)
		require.NoError(t, other.Cmd.Process.Kill())
		require.NotEqual(t, "0", exited(done), "a session cut by its replica's death is a failure")
		require.Contains(t, term.screen(), "connection broke", "the CLI says why")
		require.Equal(t, "RUNNING", state(faulty))
	})

	t.Run("a reader that stops while the job writes 1 GiB grows neither the server nor the agent by 32 MiB", func(t *testing.T) {
		serverRSS := func() int64 { return rssKiB(t, fmt.Sprintf("/proc/%d/status", srv.Cmd.Process.Pid), "") }
		agentRSS := func() int64 {
			return rssKiB(t, "", sb.must("exec", "sh", "-c", "cat /proc/$(systemctl show -p MainPID --value runmesh-agent)/status"))
		}
		// The job waits for a line, then writes 1 GiB; the CLI's reader
		// (sleep) never reads, so everything behind it must stop.
		flood := submit("PIPE", 0, "sh", "-c", "read x; head -c 1073741824 /dev/zero; echo done")
		waitState(flood, "RUNNING")
		time.Sleep(2 * time.Second) // the agent's stream for it stands
		s0, a0 := serverRSS(), agentRSS()
		reader := exec.Command("sh", "-c", "echo go | "+cli+" attach "+flood+" | sleep 600")
		reader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, reader.Start())
		t.Cleanup(func() { _ = syscall.Kill(-reader.Process.Pid, syscall.SIGKILL); _ = reader.Wait() })
		var sMax, aMax int64
		for range 20 {
			time.Sleep(500 * time.Millisecond)
			sMax, aMax = max(sMax, serverRSS()), max(aMax, agentRSS())
		}
		t.Logf("RSS growth with a stalled reader: server %d KiB, agent %d KiB", sMax-s0, aMax-a0)
		require.Less(t, sMax-s0, int64(32<<10), "the server's RSS grew")
		require.Less(t, aMax-a0, int64(32<<10), "the agent's RSS grew")
		require.Equal(t, "RUNNING", state(flood), "the job is held back by its reader, not finished")
	})
}

// rssKiB is VmRSS from a /proc/PID/status file (path), or from its text.
func rssKiB(t *testing.T, path, text string) int64 {
	t.Helper()
	if path != "" {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		text = string(b)
	}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no VmRSS in %q", text)
	return 0
}
