package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/runmesh/runmesh/controlplane/controlplanetest"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/controlplane/tenancy"
	"github.com/runmesh/runmesh/graph"
)

// cliBundle is the CLI against a real admin API over a real database.
type cliBundle struct {
	t        *testing.T
	services *controlplanetest.Services
	url      string
	envFile  string
	env      map[string]string
	ran      map[string]bool // the operations of the commands run
}

func newCLIBundle(t *testing.T) *cliBundle {
	s := controlplanetest.NewServices(t, controlplanetest.NewPool(t), nil)
	made, err := s.Tenancy.CreateAdmin(context.Background(), tenancy.NewAdmin{Name: "ops", Role: record.RolePlatformAdmin})
	require.NoError(t, err)
	srv := httptest.NewServer(graph.NewHandler(s.GraphOptions()))
	t.Cleanup(srv.Close)
	envFile := filepath.Join(t.TempDir(), "dev.env")
	require.NoError(t, os.WriteFile(envFile, []byte("RUNMESH_ADMIN_URL="+srv.URL+"\nRUNMESH_ADMIN_TOKEN="+made.Token+"\n"), 0o600))
	return &cliBundle{t: t, services: s, url: srv.URL, envFile: envFile, env: map[string]string{"HOME": t.TempDir()}, ran: map[string]bool{}}
}

// cli runs the CLI with the env file and returns its stdout and stderr.
func (b *cliBundle) cli(stdin string, args ...string) (string, string, error) {
	return b.cliContext(context.Background(), stdin, append([]string{"--env-file", b.envFile}, args...)...)
}

func (b *cliBundle) cliContext(ctx context.Context, stdin string, args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	err := runContext(ctx, args, strings.NewReader(stdin), &out, &errOut, func(k string) string { return b.env[k] })
	a := &app{}
	if c, _, ferr := a.root().Find(args); ferr == nil && c.Annotations["operation"] != "" {
		b.ran[c.Annotations["operation"]] = true
	}
	return out.String(), errOut.String(), err
}

// ok runs a command that must succeed, and returns its stdout.
func (b *cliBundle) ok(args ...string) string {
	b.t.Helper()
	out, errOut, err := b.cli("", args...)
	require.NoError(b.t, err, "runmesh %s: %s", strings.Join(args, " "), errOut)
	return out
}

// field is a value of a command's JSON answer (-o json), by dotted path.
func (b *cliBundle) field(path string, args ...string) string {
	b.t.Helper()
	var doc any
	require.NoError(b.t, json.Unmarshal([]byte(b.ok(append([]string{"-o", "json"}, args...)...)), &doc))
	return cell(lookup(doc, path))
}

// TestEveryCommandAgainstTheRealAPI runs every command of the CLI, each
// against the real admin API, and checks that every query, mutation and
// subscription of the schema has its command.
func TestEveryCommandAgainstTheRealAPI(t *testing.T) {
	t.Parallel()
	b := newCLIBundle(t)
	require.Contains(t, b.ok("viewer"), "role: PLATFORM_ADMIN")
	require.Regexp(t, `(?m)^client: dev\nserver: dev$`, b.ok("version"))
	require.Regexp(t, `rootFingerprint: [0-9a-f]{64}`, b.ok("ca"))
	require.Contains(t, b.ok("health"), "NAME")

	org := b.field("createOrganisation.id", "create-organisation", "acme")
	require.Regexp(t, `(?m)^ID +NAME +CREATED\n.* acme `, b.ok("organisations"))
	require.Contains(t, b.ok("organisation", org), "name: acme")
	_, errOut, err := b.cli("", "create-organisation", "acme")
	require.ErrorContains(t, err, "(CONFLICT)", errOut)

	pool := b.field("createPool.id", "create-pool", "gpu", "--organisation", org)
	require.Regexp(t, `gpu +acme +30 `, b.ok("pools"))
	require.Contains(t, b.ok("update-pool", "gpu", "--lease-seconds", "60"), "own: 60")
	require.Contains(t, b.ok("update-pool", "gpu", "--allow-network", "--allow-unenforced-memory"), "allowNetwork: true")
	require.Regexp(t, `(?s)images:\s+- image: localhost/busybox:latest\s+- image: localhost/tools:1`,
		b.ok("update-pool", "gpu", "--image", "localhost/busybox:latest", "--image", "localhost/tools:1"))
	require.NotContains(t, b.ok("update-pool", "gpu", "--clear-images"), "localhost/")
	require.Contains(t, b.ok("update-pool", pool, "--lease-seconds", "default"), "inForce: 30")
	require.Contains(t, b.ok("pool", pool), "name: gpu")

	// Admins and their tokens: a token prints alone on stdout.
	token := b.ok("create-admin-token", "--name", "lee", "--role", "org_admin", "--organisation", org, "--ttl", "1h")
	require.Regexp(t, `^rmat_\S+\n$`, token)
	made := b.field("createAdminToken.tokenId", "create-admin-token", "--name", "kim", "--role", "ORG_MEMBER", "--organisation", org)
	require.Contains(t, b.ok("admins", "--organisation", org), made, "the token's id names it in the list")
	admin := b.field("admins.nodes.1.id", "admins")
	require.Regexp(t, `lee +ORG_ADMIN +acme`, b.ok("admins"))
	second := b.ok("issue-admin-token", admin)
	require.NotEqual(t, token, second)
	tokenID := b.field("issueAdminToken.tokenId", "issue-admin-token", admin)
	require.Contains(t, b.ok("revoke-admin-token", tokenID), "live: false")

	enrol := b.ok("create-enrolment-token", "--pool", "gpu")
	require.Regexp(t, `^\S+\n$`, enrol)
	require.Regexp(t, `gpu +LIVE +ops`, b.ok("enrolment-tokens", "--pool", "gpu"))
	require.Contains(t, b.ok("revoke-enrolment-token", b.field("enrolmentTokens.nodes.0.id", "enrolment-tokens")), "state: REVOKED")

	// Runners: approved by the whole fingerprint, then steered.
	runner, fp := b.services.PendingRunner(t, uuid.MustParse(pool), "gpu-01")
	require.Regexp(t, `gpu-01 +gpu +PENDING`, b.ok("runners", "--status", "pending"))
	require.Contains(t, b.ok("approve-runner", runner.String(), fp), "status: APPROVED")
	require.Contains(t, b.ok("runner", runner.String()), "name: gpu-01")
	require.Contains(t, b.ok("drain-runner", runner.String()), "draining: true")
	require.Contains(t, b.ok("resume-runner", runner.String()), "draining: false")
	require.Contains(t, b.ok("clear-quarantine", runner.String()), "quarantined: false")
	_, _, err = b.cli("", "clear-gpu-health", runner.String(), "GPU-0")
	require.ErrorContains(t, err, `GPU "GPU-0" of runner `+runner.String()+` has no fault recorded`)
	hold := b.field("createHold.id", "create-hold", runner.String(), "--gpus", "1", "--reason", "fan", "--for", "10m")
	require.Contains(t, b.ok("release-hold", hold), "releasedAt:")
	require.Contains(t, b.ok("retire-runner", runner.String(), "replaced"), "retired: true")
	other, _ := b.services.PendingRunner(t, uuid.MustParse(pool), "gpu-02")
	require.Contains(t, b.ok("reject-runner", other.String(), "unknown host"), "status: REJECTED")
	third, fp3 := b.services.PendingRunner(t, uuid.MustParse(pool), "gpu-03")
	b.ok("approve-runner", third.String(), fp3)
	require.Contains(t, b.ok("revoke-runner", third.String(), "stolen"), "status: REVOKED")

	// Jobs: a secret passed by name from the environment, never printed.
	b.env["API_KEY"] = "s3cret"
	job := b.field("submitJob.id", "submit-job", "--pool", "gpu", "--image", "busybox", "--env", "API_KEY", "--", "echo", "hi")
	require.Regexp(t, job+` +gpu +QUEUED +default`, b.ok("jobs", "--state", "queued"))
	require.NotContains(t, b.ok("job", job), "s3cret")
	netted := b.field("submitJob.id", "submit-job", "--pool", "gpu", "--image", "busybox", "--network", "--workdir", "/scratch/run",
		"--memory-mib", "64", "--scratch-mib", "16", "--", "true")
	require.Regexp(t, `(?s)network: true.*workingDir: /scratch/run`, b.ok("job", netted))
	require.Contains(t, b.ok("job", netted), "scratchMiB: 16")
	selected := b.field("submitJob.id", "submit-job", "--pool", "gpu", "--image", "busybox", "--selector", "zone in (a, b), !spot", "--", "true")
	require.Contains(t, b.ok("job", selected), "selector: '!spot,zone in (a,b)'")
	_, _, err = b.cli("", "submit-job", "--pool", "gpu", "--image", "busybox", "--selector", "zone in ()", "--", "true")
	require.ErrorContains(t, err, `selector: "zone in ()": an empty list`)
	// A presigned URL comes from the environment, and is shown without its signature.
	b.env["DATA_URL"] = "https://data.example.com/set.bin?X-Amz-Signature=s3cretsig"
	data := b.field("submitJob.id", "submit-job", "--pool", "gpu", "--image", "busybox", "--input-url", "set.bin=DATA_URL", "--data-mib", "8", "--", "true")
	shown := b.ok("job", data)
	require.Contains(t, shown, "https://data.example.com/set.bin?…")
	require.NotContains(t, shown, "s3cretsig")
	_, _, err = b.cli("", "submit-job", "--pool", "gpu", "--image", "busybox", "--input", "a=datasets/a", "--data-mib", "8", "--", "true")
	require.ErrorContains(t, err, "this server has no object storage", "keys need the server's storage")
	jobsFile := filepath.Join(t.TempDir(), "jobs.yaml")
	require.NoError(t, os.WriteFile(jobsFile, []byte("- {poolId: "+pool+", image: busybox, claim: {cores: 1, wallClockSeconds: 60}}\n- {poolId: "+pool+", image: alpine, claim: {cores: 1, wallClockSeconds: 60}}\n"), 0o600))
	require.Regexp(t, `(?s)QUEUED +gpu +busybox.*QUEUED +gpu +alpine`, b.ok("submit-jobs", "--file", jobsFile))
	require.Contains(t, b.ok("cancel-job", job), "state: CANCELLED")
	require.Regexp(t, `SUBMITTED +0 .*\n.*CANCELLED`, b.ok("events", job))
	require.Regexp(t, `(?m)SUBMITTED +attempt 0.*\n.*CANCELLED`, b.ok("events", "-f", job), "follows to the end, then returns")
	require.Empty(t, b.ok("logs", job))
	require.Empty(t, b.ok("logs", "-f", job))
	require.Contains(t, b.ok("runs"), "JOB")
	require.Regexp(t, `createOrganisation +OK`, b.ok("audit-log", "--first", "100"))

	// A pool's runners as a stream: the subscription runs until stopped.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, errOut, err := b.cliContext(ctx, "", "--env-file", b.envFile, "runner-events", "gpu")
	require.ErrorIs(t, err, context.DeadlineExceeded, errOut)
	require.Contains(t, out, "gpu-01")

	// submit-job --wait follows the job and exits with its outcome.
	before := b.field("jobs.nodes.id", "jobs", "--state", "queued")
	done := make(chan error, 1)
	var waitErr bytes.Buffer
	go func() {
		var out bytes.Buffer
		done <- runContext(context.Background(), []string{"--env-file", b.envFile, "submit-job", "--pool", "gpu", "--image", "busybox", "--wait", "--", "true"},
			strings.NewReader(""), &out, &waitErr, func(k string) string { return b.env[k] })
	}()
	var waiting string
	require.Eventually(t, func() bool {
		waiting = b.field("jobs.nodes.0.id", "jobs", "--state", "queued", "--first", "1")
		return waiting != "-" && !strings.Contains(before, waiting)
	}, 10*time.Second, 50*time.Millisecond)
	b.ok("cancel-job", waiting)
	select {
	case err := <-done:
		require.Equal(t, exitCode(1), err, waitErr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("submit-job --wait did not end with its job")
	}
	require.Regexp(t, `(?s)queued in pool gpu.*SUBMITTED.*CANCELLED.*CANCELLED`, waitErr.String())
	b.ran["Mutation.submitJob"] = true

	require.Contains(t, b.ok("query", "--var", "n=1", `query($n: Int!) { auditLog(first: $n) { nodes { outcome } } }`), `"outcome"`)

	// Every root field of the schema has a command, and every one ran.
	schema := loadSchema(t)
	var missing, unrun []string
	commands := map[string]bool{}
	forEach(new(app).root(), func(c string) { commands[c] = true })
	for _, def := range []*ast.Definition{schema.Query, schema.Mutation, schema.Subscription} {
		for _, f := range def.Fields {
			if strings.HasPrefix(f.Name, "__") {
				continue
			}
			op := def.Name + "." + f.Name
			if !commands[op] {
				missing = append(missing, op)
			}
			if !b.ran[op] {
				unrun = append(unrun, op)
			}
		}
	}
	require.Empty(t, missing, "root fields without a command")
	help, _, err := b.cli("", "--help")
	require.NoError(t, err)
	forEachCommand(new(app).root(), func(c *cobra.Command) {
		if c.Annotations["operation"] != "" {
			require.Regexp(t, `(?m)^  `+c.Name()+` `, help, "runmesh --help lists %s", c.Name())
		}
	})
	require.Empty(t, unrun, "commands this test did not run")
}

// forEach calls f with the operation of every command that has one.
func forEach(c *cobra.Command, f func(string)) {
	forEachCommand(c, func(c *cobra.Command) {
		if op := c.Annotations["operation"]; op != "" {
			f(op)
		}
	})
}

// forEachCommand calls f with c and every command under it.
func forEachCommand(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		forEachCommand(sub, f)
	}
}

func loadSchema(t *testing.T) *ast.Schema {
	t.Helper()
	var sources []*ast.Source
	files, err := filepath.Glob("../../graph/schema/*.graphqls")
	require.NoError(t, err)
	for _, p := range append([]string{"../../schema.graphqls"}, files...) {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		sources = append(sources, &ast.Source{Name: p, Input: string(b)})
	}
	s, gerr := gqlparser.LoadSchema(sources...)
	require.Nil(t, gerr)
	return s
}

// submit-job --stdio and --idle-timeout reach the job, whose view shows
// them; `logs` on an interactive job says that its output is not stored,
// and fails, with -f or without; a batch job's logs are as before.
func TestInteractiveJobsFromTheCLI(t *testing.T) {
	t.Parallel()
	b := newCLIBundle(t)
	org := b.field("createOrganisation.id", "create-organisation", "acme")
	pool := b.field("createPool.id", "create-pool", "gpu", "--organisation", org)
	submit := func(flags ...string) []string {
		return append(append([]string{"submit-job", "--pool", "gpu", "--image", "busybox"}, flags...), "--", "sh")
	}
	tty := b.field("submitJob.id", submit("--stdio", "tty", "--idle-timeout", "15m")...)
	shown := b.ok("job", tty)
	require.Contains(t, shown, "stdio: TTY")
	require.Contains(t, shown, "idleTimeoutSeconds: 900")
	for _, args := range [][]string{{"logs", tty}, {"logs", "-f", tty}} {
		out, _, err := b.cli("", args...)
		require.EqualError(t, err, "job "+tty+" is interactive (stdio TTY): its output is not stored, so it has no logs", "%v", args)
		require.Empty(t, out)
	}
	pipe := b.field("submitJob.id", submit("--stdio", "PIPE")...)
	require.Regexp(t, `stdio: PIPE\n`, b.ok("job", pipe))
	_, _, err := b.cli("", "logs", pipe)
	require.ErrorContains(t, err, "(stdio PIPE): its output is not stored")

	batch := b.field("submitJob.id", submit()...)
	require.Contains(t, b.ok("job", batch), "stdio: LOGS")
	require.Empty(t, b.ok("logs", batch))
	jobsFile := filepath.Join(t.TempDir(), "jobs.yaml")
	require.NoError(t, os.WriteFile(jobsFile, []byte("- {poolId: "+pool+", image: busybox, claim: {cores: 1, wallClockSeconds: 60}}\n"), 0o600))
	listed := b.field("submitJobs.0.id", "submit-jobs", "--file", jobsFile)
	require.Contains(t, b.ok("job", listed), "stdio: LOGS", "a jobs file need not name the mode")

	for msg, flags := range map[string][]string{
		"idleTimeoutSeconds: only for an interactive job (stdio TTY or PIPE)": {"--idle-timeout", "10m"},
		"idleTimeoutSeconds: 60 to 604800 (a minute to 7 days)":               {"--stdio", "tty", "--idle-timeout", "0s"},
		`--stdio "raw": logs, tty or pipe`:                                    {"--stdio", "raw"},
		"--idle-timeout 1m0.5s: whole seconds":                                {"--stdio", "pipe", "--idle-timeout", "60.5s"},
	} {
		_, _, err := b.cli("", submit(flags...)...)
		require.ErrorContains(t, err, msg)
	}
}
