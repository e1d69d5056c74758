// Command runmesh is the admin CLI: a GraphQL client for the admin API.
//
// It finds the API and the token in RUNMESH_ADMIN_URL and
// RUNMESH_ADMIN_TOKEN, or in an env file (--env-file, e.g. the dev.env that
// `runmesh-server dev` writes). Tokens are never taken from the command line,
// where every user of the host could read them.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const usage = `usage: runmesh [--env-file FILE] COMMAND [ARGS]

commands:
  viewer                              who the token belongs to
  organisations                       list organisations
  create-organisation NAME            create an organisation (platform admins)
  pools [--organisation ID]           list pools
  create-pool [--organisation ID] [--lease-seconds N] [--queue-timeout-hours N] NAME
  create-admin-token --name N --role ROLE [--organisation ID] [--ttl-seconds N]
                                      create an admin; prints its token once
  audit-log [--first N]               recent admin actions (platform admins)
  create-enrolment-token --pool ID|NAME [--ttl-seconds N]
                                      a single-use token for one runner; prints only the token
  runners [--pool ID] [--status S]    list runners
  approve-runner ID FINGERPRINT       approve a pending runner (the whole fingerprint its host shows)
  reject-runner ID REASON             turn a pending runner away
  revoke-runner ID REASON             withdraw a runner's identity
  runner ID                           one runner: capacity, GPUs, labels, health
  drain-runner ID | resume-runner ID  stop or resume new work for a runner
  retire-runner ID REASON             take a runner out of the fleet for good
  clear-quarantine ID                 let a quarantined runner work again
  submit-job --pool ID|NAME --image IMAGE [--cores N] [--memory-mib N] [--gpus N] [--wall-clock D]
             [--priority N] [--max-attempts N] [--idempotency-key K] [--kind K] [--env NAME ...] -- COMMAND...
                                      queue a job; --env NAME passes NAME's value from this environment
  jobs [--pool ID] [--state S]        list jobs
  job ID                              one job: state, events, runs, logs
  cancel-job ID                       cancel a job
  query [--var NAME=JSON ...] QUERY   run any GraphQL operation; QUERY "-" reads stdin

environment: RUNMESH_ADMIN_URL, RUNMESH_ADMIN_TOKEN (or --env-file)
`

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "runmesh:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) error {
	global := flag.NewFlagSet("runmesh", flag.ContinueOnError)
	global.SetOutput(stderr)
	global.Usage = func() { fmt.Fprint(stderr, usage) }
	envFile := global.String("env-file", "", "read RUNMESH_ADMIN_URL and RUNMESH_ADMIN_TOKEN from this file")
	timeout := global.Duration("timeout", 30*time.Second, "request timeout")
	if err := global.Parse(args); err != nil {
		return err
	}
	if global.NArg() == 0 {
		global.Usage()
		return errors.New("no command given")
	}
	c, err := newClient(*envFile, getenv)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	cmd, rest := global.Arg(0), global.Args()[1:]
	op, ok := commands[cmd]
	if !ok {
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
	switch cmd {
	case "create-enrolment-token":
		return createEnrolmentToken(ctx, c, rest, stdout, stderr)
	case "submit-job":
		return submitJob(ctx, c, rest, stdout, stderr, getenv)
	}
	query, vars, err := op(rest, stdin, stderr)
	if err != nil {
		return err
	}
	data, err := c.do(ctx, query, vars)
	if err != nil {
		return err
	}
	return printJSON(stdout, data)
}

// createEnrolmentToken prints the token alone on stdout, so that
// `runmesh create-enrolment-token --pool gpu > enrol.token` leaves a file
// for `runmesh-agent enrol --token-file`. A pool may be named instead of
// given by id when the name is unambiguous among the pools the caller sees.
func createEnrolmentToken(ctx context.Context, c *client, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("create-enrolment-token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pool := fs.String("pool", "", "pool id or name")
	ttl := fs.Int("ttl-seconds", 3600, "how long the token stays usable")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pool == "" {
		return errors.New("usage: create-enrolment-token --pool ID|NAME [--ttl-seconds N]")
	}
	poolID, err := resolvePool(ctx, c, *pool)
	if err != nil {
		return err
	}
	data, err := c.do(ctx, `mutation($p: ID!, $ttl: Int!) { createEnrolmentToken(poolId: $p, ttlSeconds: $ttl) { token expiresAt pool { name } } }`,
		map[string]any{"p": poolID, "ttl": *ttl})
	if err != nil {
		return err
	}
	var out struct {
		CreateEnrolmentToken struct {
			Token     string
			ExpiresAt string
			Pool      struct{ Name string }
		}
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return err
	}
	t := out.CreateEnrolmentToken
	fmt.Fprintf(stderr, "enrolment token for pool %q, single use, expires %s\n", t.Pool.Name, t.ExpiresAt)
	_, err = fmt.Fprintln(stdout, t.Token)
	return err
}

// resolvePool takes a pool id, or a pool name that is unambiguous among
// the pools the caller sees.
func resolvePool(ctx context.Context, c *client, pool string) (string, error) {
	if looksLikeID(pool) {
		return pool, nil
	}
	data, err := c.do(ctx, `{ pools { id name } }`, nil)
	if err != nil {
		return "", err
	}
	var out struct {
		Pools []struct{ ID, Name string }
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return "", err
	}
	var ids []string
	for _, p := range out.Pools {
		if p.Name == pool {
			ids = append(ids, p.ID)
		}
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("no pool named %q", pool)
	case 1:
		return ids[0], nil
	default:
		return "", fmt.Errorf("%d pools are named %q: give the id (runmesh pools)", len(ids), pool)
	}
}

// submitJob queues a job. Environment values come from this process's
// environment by name, never from the command line.
func submitJob(ctx context.Context, c *client, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("submit-job", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pool := fs.String("pool", "", "pool id or name")
	image := fs.String("image", "", "container image")
	cores := fs.Float64("cores", 1, "cores")
	memory := fs.Int("memory-mib", 0, "memory (MiB)")
	gpus := fs.Int("gpus", 0, "GPUs")
	wall := fs.Duration("wall-clock", time.Hour, "wall clock limit")
	priority := fs.Int("priority", 0, "priority (-1000 to 1000)")
	attempts := fs.Int("max-attempts", 3, "attempts before it fails")
	key := fs.String("idempotency-key", "", "the same key returns the same job")
	kind := fs.String("kind", "default", "kind of runner it needs")
	var env []map[string]any
	fs.Func("env", "pass the variable NAME with its value from this environment (repeatable)", func(name string) error {
		v := getenv(name)
		if v == "" {
			return fmt.Errorf("%s is not set in this environment", name)
		}
		env = append(env, map[string]any{"name": name, "value": v})
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *pool == "" || *image == "" {
		return errors.New("usage: submit-job --pool ID|NAME --image IMAGE [flags] -- COMMAND...")
	}
	poolID, err := resolvePool(ctx, c, *pool)
	if err != nil {
		return err
	}
	in := map[string]any{
		"poolId": poolID, "image": *image, "command": fs.Args(), "env": env, "priority": *priority,
		"maxAttempts": *attempts, "kind": *kind, "idempotencyKey": nullable(*key),
		"claim": map[string]any{"cores": *cores, "memoryMiB": *memory, "gpus": *gpus, "wallClockSeconds": int(wall.Seconds())},
	}
	data, err := c.do(ctx, `mutation($in: SubmitJobInput!) { submitJob(input: $in) { id state pool { name } } }`, map[string]any{"in": in})
	if err != nil {
		return err
	}
	return printJSON(stdout, data)
}

func looksLikeID(s string) bool {
	return len(s) == 36 && strings.Count(s, "-") == 4
}

type command func(args []string, stdin io.Reader, stderr io.Writer) (query string, vars map[string]any, err error)

var commands = map[string]command{
	"viewer":        fixed(`{ viewer { id name role organisation { id name } } }`),
	"organisations": fixed(`{ organisations { id name createdAt } }`),
	"create-organisation": func(args []string, _ io.Reader, _ io.Writer) (string, map[string]any, error) {
		if len(args) != 1 {
			return "", nil, errors.New("usage: create-organisation NAME")
		}
		return `mutation($in: CreateOrganisationInput!) { createOrganisation(input: $in) { id name } }`,
			map[string]any{"in": map[string]any{"name": args[0]}}, nil
	},
	"pools": func(args []string, _ io.Reader, stderr io.Writer) (string, map[string]any, error) {
		fs := flag.NewFlagSet("pools", flag.ContinueOnError)
		fs.SetOutput(stderr)
		org := fs.String("organisation", "", "organisation id")
		if err := fs.Parse(args); err != nil {
			return "", nil, err
		}
		return `query($org: ID) { pools(organisationId: $org) { id name organisation { name }
			leaseSeconds { inForce isDefault } queueTimeoutHours { inForce isDefault } } }`,
			map[string]any{"org": nullable(*org)}, nil
	},
	"create-pool": func(args []string, _ io.Reader, stderr io.Writer) (string, map[string]any, error) {
		fs := flag.NewFlagSet("create-pool", flag.ContinueOnError)
		fs.SetOutput(stderr)
		org := fs.String("organisation", "", "organisation id (platform admins; empty: a platform pool)")
		lease := fs.Int("lease-seconds", 0, "lease lifetime (0: the default)")
		timeout := fs.Int("queue-timeout-hours", 0, "queue timeout (0: the default)")
		if err := fs.Parse(args); err != nil {
			return "", nil, err
		}
		if fs.NArg() != 1 {
			return "", nil, errors.New("usage: create-pool [flags] NAME")
		}
		in := map[string]any{"name": fs.Arg(0), "organisationId": nullable(*org)}
		if *lease != 0 {
			in["leaseSeconds"] = *lease
		}
		if *timeout != 0 {
			in["queueTimeoutHours"] = *timeout
		}
		return `mutation($in: CreatePoolInput!) { createPool(input: $in) { id name organisation { name } } }`,
			map[string]any{"in": in}, nil
	},
	"create-admin-token": func(args []string, _ io.Reader, stderr io.Writer) (string, map[string]any, error) {
		fs := flag.NewFlagSet("create-admin-token", flag.ContinueOnError)
		fs.SetOutput(stderr)
		name := fs.String("name", "", "who the token is for")
		role := fs.String("role", "", "PLATFORM_ADMIN, ORG_ADMIN or ORG_MEMBER")
		org := fs.String("organisation", "", "organisation id (organisation roles)")
		ttl := fs.Int("ttl-seconds", 0, "lifetime (0: no expiry)")
		if err := fs.Parse(args); err != nil {
			return "", nil, err
		}
		if *name == "" || *role == "" {
			return "", nil, errors.New("usage: create-admin-token --name N --role ROLE [--organisation ID] [--ttl-seconds N]")
		}
		in := map[string]any{"name": *name, "role": strings.ToUpper(*role), "organisationId": nullable(*org)}
		if *ttl != 0 {
			in["ttlSeconds"] = *ttl
		}
		return `mutation($in: CreateAdminTokenInput!) { createAdminToken(input: $in) { token expiresAt admin { id name role } } }`,
			map[string]any{"in": in}, nil
	},
	"audit-log": func(args []string, _ io.Reader, stderr io.Writer) (string, map[string]any, error) {
		fs := flag.NewFlagSet("audit-log", flag.ContinueOnError)
		fs.SetOutput(stderr)
		first := fs.Int("first", 20, "how many entries")
		if err := fs.Parse(args); err != nil {
			return "", nil, err
		}
		return `query($n: Int!) { auditLog(first: $n) { nodes { id at actorName action outcome detail } } }`,
			map[string]any{"n": *first}, nil
	},
	"create-enrolment-token": func([]string, io.Reader, io.Writer) (string, map[string]any, error) {
		return "", nil, errors.New("handled in run")
	},
	"runners": func(args []string, _ io.Reader, stderr io.Writer) (string, map[string]any, error) {
		fs := flag.NewFlagSet("runners", flag.ContinueOnError)
		fs.SetOutput(stderr)
		pool := fs.String("pool", "", "pool id")
		status := fs.String("status", "", "PENDING, APPROVED, REJECTED or REVOKED")
		if err := fs.Parse(args); err != nil {
			return "", nil, err
		}
		return `query($p: ID, $s: RunnerStatus) { runners(poolId: $p, status: $s) { nodes { id name status statusReason
			fingerprintHint pool { name } enrolledAt certificate { serial notAfter }
			online takingWork quarantined quarantineReason draining capacity { cores memoryMiB } gpus { index name healthy } } } }`,
			map[string]any{"p": nullable(*pool), "s": nullable(strings.ToUpper(*status))}, nil
	},
	"runner": func(args []string, _ io.Reader, _ io.Writer) (string, map[string]any, error) {
		if len(args) != 1 {
			return "", nil, errors.New("usage: runner ID")
		}
		return `query($id: ID!) { runner(id: $id) { id name status statusReason fingerprintHint pool { name } organisation { name }
			online lastHeartbeatAt takingWork agentVersion quarantined quarantineReason draining retired certificate { serial notAfter }
			capacity { hostname cores memoryMiB memoryAvailableMiB diskFreeMiB limitedBy gpusUnavailable driverVersion }
			gpus { index uuid name memoryTotalMiB memoryUsedMiB utilisationPercent temperatureC powerWatts healthy health }
			labels { key value source } health { name ok severity title } } }`, map[string]any{"id": args[0]}, nil
	},
	"drain-runner":     runnerControl("drainRunner"),
	"resume-runner":    runnerControl("resumeRunner"),
	"clear-quarantine": runnerControl("clearQuarantine"),
	"retire-runner":    runnerDecision("retireRunner", "reason", "retire-runner ID REASON"),
	"approve-runner":   runnerDecision("approveRunner", "fingerprint", "approve-runner ID FINGERPRINT"),
	"submit-job": func([]string, io.Reader, io.Writer) (string, map[string]any, error) {
		return "", nil, errors.New("handled in run")
	},
	"jobs": func(args []string, _ io.Reader, stderr io.Writer) (string, map[string]any, error) {
		fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
		fs.SetOutput(stderr)
		pool := fs.String("pool", "", "pool id")
		state := fs.String("state", "", "QUEUED, LEASED, RUNNING, SUCCEEDED, FAILED, CANCELLED, EXPIRED or BLOCKED")
		if err := fs.Parse(args); err != nil {
			return "", nil, err
		}
		return `query($p: ID, $s: JobState) { jobs(poolId: $p, state: $s) { nodes { id state stateReason image attempt submittedAt pool { name } } } }`,
			map[string]any{"p": nullable(*pool), "s": nullable(strings.ToUpper(*state))}, nil
	},
	"job": func(args []string, _ io.Reader, _ io.Writer) (string, map[string]any, error) {
		if len(args) != 1 {
			return "", nil, errors.New("usage: job ID")
		}
		return `query($id: ID!) { job(id: $id) { id state stateReason image command envNames claim { cores memoryMiB gpus wallClockSeconds }
			priority maxAttempts attempt kind cancelRequested submittedAt finishedAt pool { name }
			events { nodes { at type attempt detail } } runs { attempt runnerName leasedAt finishedAt exitCode returnReason hostFault oom peakMemoryMiB imageDigest runnerVersion }
			logs } }`, map[string]any{"id": args[0]}, nil
	},
	"cancel-job": func(args []string, _ io.Reader, _ io.Writer) (string, map[string]any, error) {
		if len(args) != 1 {
			return "", nil, errors.New("usage: cancel-job ID")
		}
		return `mutation($id: ID!) { cancelJob(id: $id) { id state cancelRequested } }`, map[string]any{"id": args[0]}, nil
	},
	"reject-runner": runnerDecision("rejectRunner", "reason", "reject-runner ID REASON"),
	"revoke-runner": runnerDecision("revokeRunner", "reason", "revoke-runner ID REASON"),
	"query": func(args []string, stdin io.Reader, stderr io.Writer) (string, map[string]any, error) {
		fs := flag.NewFlagSet("query", flag.ContinueOnError)
		fs.SetOutput(stderr)
		vars := map[string]any{}
		fs.Func("var", "NAME=JSON variable (repeatable; a bare word is a string)", func(s string) error {
			k, v, ok := strings.Cut(s, "=")
			if !ok || k == "" {
				return errors.New("want NAME=VALUE")
			}
			var decoded any
			if err := json.Unmarshal([]byte(v), &decoded); err != nil {
				decoded = v
			}
			vars[k] = decoded
			return nil
		})
		if err := fs.Parse(args); err != nil {
			return "", nil, err
		}
		if fs.NArg() != 1 {
			return "", nil, errors.New("usage: query [--var NAME=JSON ...] QUERY")
		}
		q := fs.Arg(0)
		if q == "-" {
			b, err := io.ReadAll(stdin)
			if err != nil {
				return "", nil, err
			}
			q = string(b)
		}
		return q, vars, nil
	},
}

func runnerDecision(mutation, arg, usage string) command {
	return func(args []string, _ io.Reader, _ io.Writer) (string, map[string]any, error) {
		if len(args) != 2 {
			return "", nil, errors.New("usage: " + usage)
		}
		return fmt.Sprintf(`mutation($id: ID!, $v: String!) { %s(id: $id, %s: $v) { id name status statusReason certificate { serial notAfter } } }`, mutation, arg),
			map[string]any{"id": args[0], "v": args[1]}, nil
	}
}

func runnerControl(mutation string) command {
	return func(args []string, _ io.Reader, _ io.Writer) (string, map[string]any, error) {
		if len(args) != 1 {
			return "", nil, fmt.Errorf("usage: %s ID", mutation)
		}
		return fmt.Sprintf(`mutation($id: ID!) { %s(id: $id) { id name online takingWork draining quarantined quarantineReason } }`, mutation),
			map[string]any{"id": args[0]}, nil
	}
}

func fixed(q string) command {
	return func(args []string, _ io.Reader, _ io.Writer) (string, map[string]any, error) {
		if len(args) != 0 {
			return "", nil, fmt.Errorf("unexpected arguments %v", args)
		}
		return q, nil, nil
	}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func printJSON(w io.Writer, v json.RawMessage) error {
	var pretty any
	if err := json.Unmarshal(v, &pretty); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(pretty)
}
