package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/spf13/cobra"

	"github.com/runmesh/runmesh/cmd/runmesh/internal/api"
)

// followCommands are the commands of the schema's subscriptions, and
// submit-job, which can follow the job it queued.
func (a *app) followCommands() []*cobra.Command {
	return []*cobra.Command{a.eventsCommand(), a.logsCommand(), a.runnerEventsCommand()}
}

// wsData is a subscription item's data, or its errors.
func wsData[T any](r graphql.BaseResponse[*T]) (*T, error) {
	if len(r.Errors) > 0 {
		return nil, readable(r.Errors)
	}
	if r.Data == nil {
		return nil, errors.New("a subscription item without data")
	}
	return r.Data, nil
}

func (a *app) eventsCommand() *cobra.Command {
	var follow bool
	c := operation(&cobra.Command{
		Use: "events JOB-ID", Short: "A job's events; -f follows them until the job has finished", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !follow {
				out, err := call(cmd.Context(), a, func(ctx context.Context, c graphql.Client) (*api.JobResponse, error) { return api.Job(ctx, c, args[0]) })
				if err != nil {
					return err
				}
				if out.Job == nil {
					return fmt.Errorf("no job %s", args[0])
				}
				return a.print(out, view{list: "job.events.nodes", cols: eventCols})
			}
			return a.followEvents(cmd.Context(), args[0], func(e api.JobEventsJobEventsJobEvent) error { return a.printEvent(e) })
		},
	}, "Subscription.jobEvents")
	c.Flags().BoolVarP(&follow, "follow", "f", false, "follow the events as they happen")
	return c
}

var eventCols = cols("AT=at", "TYPE=type", "ATTEMPT=attempt", "DETAIL=detail")

// printEvent writes one followed event: a line, or a JSON document a line
// with -o json.
func (a *app) printEvent(e api.JobEventsJobEventsJobEvent) error {
	if a.flags.output == "table" {
		_, err := fmt.Fprintf(a.stdout, "%s  %-16s attempt %d  %s\n", e.At.UTC().Format("15:04:05.000"), e.Type, e.Attempt, e.Detail)
		return err
	}
	return json.NewEncoder(a.stdout).Encode(e)
}

func (a *app) followEvents(ctx context.Context, job string, each func(api.JobEventsJobEventsJobEvent) error) error {
	return subscribe(ctx, a, func(ctx context.Context, ws graphql.WebSocketClient) (<-chan api.JobEventsWsResponse, string, error) {
		return api.JobEvents(ctx, ws, job)
	}, func(r api.JobEventsWsResponse) error {
		d, err := wsData(graphql.BaseResponse[*api.JobEventsResponse](r))
		if err != nil {
			return err
		}
		return each(d.JobEvents)
	})
}

func (a *app) logsCommand() *cobra.Command {
	var follow bool
	c := operation(&cobra.Command{
		Use: "logs JOB-ID", Short: "A job's output; -f streams all of it until the job has finished", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !follow {
				out, err := call(cmd.Context(), a, func(ctx context.Context, c graphql.Client) (*api.JobResponse, error) { return api.Job(ctx, c, args[0]) })
				if err != nil {
					return err
				}
				if err := logsKept(args[0], out.Job); err != nil {
					return err
				}
				_, err = io.WriteString(a.stdout, out.Job.Logs)
				return err
			}
			out, err := call(cmd.Context(), a, func(ctx context.Context, c graphql.Client) (*api.JobProgressResponse, error) {
				return api.JobProgress(ctx, c, args[0])
			})
			if err != nil {
				return err
			}
			if err := logsKept(args[0], out.Job); err != nil {
				return err
			}
			return subscribe(cmd.Context(), a, func(ctx context.Context, ws graphql.WebSocketClient) (<-chan api.JobLogsWsResponse, string, error) {
				return api.JobLogs(ctx, ws, args[0])
			}, func(r api.JobLogsWsResponse) error {
				d, err := wsData(graphql.BaseResponse[*api.JobLogsResponse](r))
				if err != nil {
					return err
				}
				_, err = io.WriteString(a.stdout, d.JobLogs.Data)
				return err
			})
		},
	}, "Subscription.jobLogs")
	c.Flags().BoolVarP(&follow, "follow", "f", false, "stream the output as it comes")
	return c
}

// logsKept refuses to show the logs of an interactive job: its output is
// never stored, so an empty answer would read as a job that wrote nothing.
// job is nil when there is no such job.
func logsKept[J any, P interface {
	*J
	GetId() string
	GetStdio() api.Stdio
}](id string, job P) error {
	switch {
	case job == nil:
		return fmt.Errorf("no job %s", id)
	case job.GetStdio() == api.StdioLogs:
		return nil
	}
	return fmt.Errorf("job %s is interactive (stdio %s): its output is not stored, so it has no logs", job.GetId(), job.GetStdio())
}

func (a *app) runnerEventsCommand() *cobra.Command {
	return operation(&cobra.Command{
		Use: "runner-events POOL", Short: "A pool's runners as they are, then each again when it changes (until interrupted)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pool, err := a.poolID(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return subscribe(cmd.Context(), a, func(ctx context.Context, ws graphql.WebSocketClient) (<-chan api.RunnerEventsWsResponse, string, error) {
				return api.RunnerEvents(ctx, ws, pool)
			}, func(r api.RunnerEventsWsResponse) error {
				d, err := wsData(graphql.BaseResponse[*api.RunnerEventsResponse](r))
				if err != nil {
					return err
				}
				x := d.RunnerEvents
				if a.flags.output == "table" {
					_, err = fmt.Fprintf(a.stdout, "%s  %s  %s  online=%s taking-work=%s quarantined=%s draining=%s\n", time.Now().UTC().Format("15:04:05"),
						x.Name, x.Status, cell(x.Online), cell(x.TakingWork), cell(x.Quarantined), cell(x.Draining))
					return err
				}
				return json.NewEncoder(a.stdout).Encode(x)
			})
		},
	}, "Subscription.runnerEvents")
}

func (a *app) submitJobCommand() *cobra.Command {
	var in api.SubmitJobInput
	var pool, key, workdir, selector, stdio string
	var wall, idle time.Duration
	var env, inputs, inputURLs, outputs []string
	var wait bool
	c := operation(&cobra.Command{
		Use:   "submit-job --pool POOL --image IMAGE [flags] -- COMMAND...",
		Short: "Queue a job; --wait follows it and exits with its exit code",
		Long: `Queue a job. --env NAME passes the variable NAME with its value from this environment
(values never go on the command line). --input NAME=KEY fetches an object of the server's
storage into /inputs/NAME; --input-url NAME=VAR fetches the URL you presigned, read from the
environment variable VAR (a presigned URL is a credential: never on the command line);
--upload PATH=KEY uploads the file PATH (under /outputs/) to the object KEY. With --wait the job's events print on stderr as they
happen, and runmesh exits with the job's exit code (1 when it ended without one).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := a.poolID(cmd.Context(), pool)
			if err != nil {
				return err
			}
			in.PoolId, in.Command, in.IdempotencyKey, in.WorkingDir, in.Selector = id, args, opt(key), opt(workdir), opt(selector)
			in.Claim.WallClockSeconds = int(wall.Seconds())
			if err := stdioFlags(&in, stdio, idle, a.changed("idle-timeout")); err != nil {
				return err
			}
			in.Env = in.Env[:0]
			for _, name := range env {
				v := a.getenv(name)
				if v == "" {
					return fmt.Errorf("--env %s: it is not set in this environment", name)
				}
				in.Env = append(in.Env, api.EnvVarInput{Name: name, Value: v})
			}
			if err := a.jobData(&in, inputs, inputURLs, outputs); err != nil {
				return err
			}
			out, err := call(cmd.Context(), a, func(ctx context.Context, c graphql.Client) (*api.SubmitJobResponse, error) {
				return api.SubmitJob(ctx, c, in)
			})
			if err != nil {
				return err
			}
			if !wait {
				return a.print(out, view{})
			}
			fmt.Fprintf(a.stderr, "job %s queued in pool %s\n", out.SubmitJob.Id, out.SubmitJob.Pool.Name)
			return a.waitFor(cmd.Context(), out.SubmitJob.Id, true)
		},
	}, "Mutation.submitJob")
	f := c.Flags()
	f.StringVar(&pool, "pool", "", "the pool (id or name)")
	f.StringVar(&in.Image, "image", "", "the container image")
	f.Float64Var(&in.Claim.Cores, "cores", 1, "cores it claims")
	f.IntVar(&in.Claim.MemoryMiB, "memory-mib", 0, "memory it claims (MiB)")
	f.IntVar(&in.Claim.Gpus, "gpus", 0, "GPUs it claims")
	f.IntVar(&in.Claim.ScratchMiB, "scratch-mib", 0, "a tmpfs of this size at /scratch (within --memory-mib)")
	f.IntVar(&in.Claim.DataMiB, "data-mib", 0, "what the inputs may take on the runner (MiB; required with --input)")
	f.BoolVar(&in.Network, "network", false, "a network (the pool must allow it)")
	f.StringVar(&workdir, "workdir", "", "the working directory (in the image, or under /scratch)")
	f.DurationVar(&wall, "wall-clock", time.Hour, "how long it may run")
	f.IntVar(&in.Priority, "priority", 0, "priority (-1000 to 1000)")
	f.IntVar(&in.MaxAttempts, "max-attempts", 3, "attempts before it fails")
	f.StringVar(&key, "idempotency-key", "", "the same key in the same pool returns the same job")
	f.StringVar(&in.Kind, "kind", "default", "the kind of runner it needs")
	f.StringVar(&selector, "selector", "", "which runners may take it, by their labels: 'zone=a,gpu in (a100,h100),!spot'")
	f.StringVar(&stdio, "stdio", "logs", "logs (its output kept as its logs), tty or pipe (interactive: its output is not stored)")
	f.DurationVar(&idle, "idle-timeout", 0, "a tty or pipe job's bound on time without a byte in either direction (1m to 168h)")
	f.StringArrayVar(&env, "env", nil, "pass this variable with its value from this environment (repeatable)")
	f.BoolVar(&wait, "wait", false, "follow the job and exit with its exit code")
	f.StringArrayVar(&inputs, "input", nil, "NAME=KEY: the storage's object KEY as /inputs/NAME (repeatable)")
	f.StringArrayVar(&inputURLs, "input-url", nil, "NAME=VAR: the presigned URL in the environment variable VAR as /inputs/NAME (repeatable)")
	f.StringArrayVar(&outputs, "upload", nil, "PATH=KEY: an output: upload PATH (under /outputs/) to the object KEY (repeatable)")
	_ = c.MarkFlagRequired("pool")
	_ = c.MarkFlagRequired("image")
	return c
}

// stdioFlags reads --stdio and --idle-timeout (given: whether it was) into
// the submission; the server checks the timeout's bounds.
func stdioFlags(in *api.SubmitJobInput, stdio string, idle time.Duration, given bool) error {
	switch mode := api.Stdio(strings.ToUpper(stdio)); mode {
	case api.StdioLogs, api.StdioTty, api.StdioPipe:
		in.Stdio = mode
	default:
		return fmt.Errorf("--stdio %q: logs, tty or pipe", stdio)
	}
	in.IdleTimeoutSeconds = nil
	if given {
		if idle%time.Second != 0 {
			return fmt.Errorf("--idle-timeout %s: whole seconds", idle)
		}
		n := int(idle / time.Second) // 0 too: the server says what it may be
		in.IdleTimeoutSeconds = &n
	}
	return nil
}

// waitFor follows a job's events (on stderr if show) until it has
// finished, and returns its exit code as an exitCode (0: nil).
func (a *app) waitFor(ctx context.Context, job string, show bool) error {
	err := a.followEvents(ctx, job, func(e api.JobEventsJobEventsJobEvent) error {
		if !show {
			return nil
		}
		_, err := fmt.Fprintf(a.stderr, "%s  %-16s attempt %d  %s\n", e.At.UTC().Format("15:04:05.000"), e.Type, e.Attempt, e.Detail)
		return err
	})
	if err != nil {
		return err
	}
	out, err := call(ctx, a, func(ctx context.Context, c graphql.Client) (*api.JobProgressResponse, error) {
		return api.JobProgress(ctx, c, job)
	})
	if err != nil {
		return err
	}
	j := out.Job
	fmt.Fprintf(a.stderr, "job %s %s%s\n", j.Id, j.State, strings.TrimSuffix(": "+j.StateReason, ": "))
	if j.State == api.JobStateSucceeded {
		return nil
	}
	if n := len(j.Runs); n > 0 && j.Runs[n-1].ExitCode != nil && *j.Runs[n-1].ExitCode != 0 {
		return exitCode(*j.Runs[n-1].ExitCode)
	}
	return exitCode(1)
}

func (a *app) versionCommand() *cobra.Command {
	return operation(&cobra.Command{
		Use: "version", Short: "This CLI's version and the answering server's", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(a.stdout, "client: %s\n", version)
			out, err := call(cmd.Context(), a, func(ctx context.Context, c graphql.Client) (*api.VersionResponse, error) { return api.Version(ctx, c) })
			if err != nil {
				return fmt.Errorf("server: %w", err)
			}
			_, err = fmt.Fprintf(a.stdout, "server: %s\n", out.Version)
			return err
		},
	}, "Query.version")
}

// jobData reads --input, --input-url and --output into the submission; the
// server checks the names, keys and paths.
func (a *app) jobData(in *api.SubmitJobInput, inputs, inputURLs, outputs []string) error {
	in.Inputs, in.Outputs = nil, nil
	for _, s := range inputs {
		name, key, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("--input %q: NAME=KEY", s)
		}
		in.Inputs = append(in.Inputs, api.JobInputInput{Name: name, Key: &key})
	}
	for _, s := range inputURLs {
		name, v, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("--input-url %q: NAME=VAR (the URL in the environment variable VAR)", s)
		}
		u := a.getenv(v)
		if u == "" {
			return fmt.Errorf("--input-url %s: %s is not set in this environment", name, v)
		}
		in.Inputs = append(in.Inputs, api.JobInputInput{Name: name, Url: &u})
	}
	for _, s := range outputs {
		path, key, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("--upload %q: PATH=KEY", s)
		}
		in.Outputs = append(in.Outputs, api.JobOutputInput{Path: path, Key: key})
	}
	return nil
}
