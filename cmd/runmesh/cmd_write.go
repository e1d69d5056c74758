package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/runmesh/runmesh/cmd/runmesh/internal/api"
)

// changeCommands are the commands of the schema's mutations.
func (a *app) changeCommands() []*cobra.Command {
	return []*cobra.Command{
		a.single("create-organisation NAME", "Mutation.createOrganisation", "Create an organisation (platform admins)", cobra.ExactArgs(1),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.CreateOrganisation(ctx, c, args[0])
			}),
		a.createPoolCommand(),
		a.updatePoolCommand(),
		a.createAdminTokenCommand(),
		a.issueAdminTokenCommand(),
		a.single("revoke-admin-token TOKEN-ID", "Mutation.revokeAdminToken", "Revoke an admin token at once, on every replica (ids: runmesh admins)", cobra.ExactArgs(1),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.RevokeAdminToken(ctx, c, args[0])
			}),
		a.createEnrolmentTokenCommand(),
		a.single("revoke-enrolment-token ID", "Mutation.revokeEnrolmentToken", "Withdraw an unused enrolment token", cobra.ExactArgs(1),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.RevokeEnrolmentToken(ctx, c, args[0])
			}),
		a.single("approve-runner ID FINGERPRINT", "Mutation.approveRunner", "Approve a pending runner: the whole fingerprint its host shows (runmesh-agent fingerprint)", cobra.ExactArgs(2),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.ApproveRunner(ctx, c, args[0], args[1])
			}),
		a.single("reject-runner ID REASON", "Mutation.rejectRunner", "Turn a pending runner away for good", cobra.ExactArgs(2),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.RejectRunner(ctx, c, args[0], args[1])
			}),
		a.single("revoke-runner ID REASON", "Mutation.revokeRunner", "Withdraw a runner's identity: its certificates stop working", cobra.ExactArgs(2),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.RevokeRunner(ctx, c, args[0], args[1])
			}),
		a.single("drain-runner ID", "Mutation.drainRunner", "Stop a runner taking new work; what it runs carries on", cobra.ExactArgs(1),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.DrainRunner(ctx, c, args[0])
			}),
		a.single("resume-runner ID", "Mutation.resumeRunner", "Let a drained runner take work again", cobra.ExactArgs(1),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.ResumeRunner(ctx, c, args[0])
			}),
		a.single("retire-runner ID REASON", "Mutation.retireRunner", "Take a runner out of the fleet for good", cobra.ExactArgs(2),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.RetireRunner(ctx, c, args[0], args[1])
			}),
		a.single("clear-quarantine ID", "Mutation.clearQuarantine", "Lift a quarantine, accepting what the runner reports now", cobra.ExactArgs(1),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.ClearQuarantine(ctx, c, args[0])
			}),
		a.single("clear-gpu-health RUNNER GPU-UUID", "Mutation.clearGpuHealth", "Return a GPU the server holds a fault against to service", cobra.ExactArgs(2),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.ClearGPUHealth(ctx, c, args[0], args[1])
			}),
		a.submitJobCommand(),
		a.submitJobsCommand(),
		a.single("cancel-job ID", "Mutation.cancelJob", "Cancel a job: at once when queued, by its runner when running", cobra.ExactArgs(1),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.CancelJob(ctx, c, args[0])
			}),
		a.createHoldCommand(),
		a.single("release-hold ID", "Mutation.releaseHold", "End a hold (ids: runmesh runner ID, or pool ID)", cobra.ExactArgs(1),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.ReleaseHold(ctx, c, args[0])
			}),
	}
}

func (a *app) createPoolCommand() *cobra.Command {
	var org string
	var lease, timeout int
	var unenforced, network bool
	var images []string
	c := a.single("create-pool NAME", "Mutation.createPool", "Create a pool (a platform admin without --organisation: a platform pool)", cobra.ExactArgs(1),
		func(ctx context.Context, c graphql.Client, args []string) (any, error) {
			in := api.CreatePoolInput{Name: args[0], OrganisationId: opt(org), LeaseSeconds: optInt(lease), QueueTimeoutHours: optInt(timeout), AllowUnenforcedMemory: &unenforced,
				AllowNetwork: &network, Images: images}
			return api.CreatePool(ctx, c, in)
		})
	c.Flags().StringVar(&org, "organisation", "", "the organisation's id (platform admins)")
	c.Flags().IntVar(&lease, "lease-seconds", 0, "how long a lease lives without a heartbeat (0: the default)")
	c.Flags().IntVar(&timeout, "queue-timeout-hours", 0, "how long a job may wait (0: the default)")
	c.Flags().BoolVar(&unenforced, "allow-unenforced-memory", false, "memory-claiming jobs may run where memory limits are not enforced")
	c.Flags().BoolVar(&network, "allow-network", false, "its jobs may ask for a network (submit-job --network)")
	c.Flags().StringArrayVar(&images, "image", nil, "an image its runners pull before they take work (REF or REF@sha256:DIGEST; repeat it)")
	return c
}

func (a *app) updatePoolCommand() *cobra.Command {
	var name, lease, timeout string
	var unenforced, network, clearImages bool
	var images []string
	c := a.single("update-pool POOL", "Mutation.updatePool", "Change a pool's name or settings; a setting given as 'default' returns to the default", cobra.ExactArgs(1),
		func(ctx context.Context, c graphql.Client, args []string) (any, error) {
			id, err := a.poolID(ctx, args[0])
			if err != nil {
				return nil, err
			}
			leaseN, leaseReset, err := setting("lease-seconds", lease)
			if err != nil {
				return nil, err
			}
			timeoutN, timeoutReset, err := setting("queue-timeout-hours", timeout)
			if err != nil {
				return nil, err
			}
			if leaseReset {
				if _, err := api.ResetPoolLease(ctx, c, id); err != nil {
					return nil, err
				}
			}
			if timeoutReset {
				if _, err := api.ResetPoolQueueTimeout(ctx, c, id); err != nil {
					return nil, err
				}
			}
			var mem, net *bool
			if a.changed("allow-unenforced-memory") {
				mem = &unenforced
			}
			if a.changed("allow-network") {
				net = &network
			}
			if clearImages {
				if _, err := api.ClearPoolImages(ctx, c, id); err != nil {
					return nil, err
				}
			}
			return api.UpdatePool(ctx, c, id, opt(name), leaseN, timeoutN, mem, net, images)
		})
	c.Flags().StringVar(&name, "name", "", "a new name")
	c.Flags().StringVar(&lease, "lease-seconds", "", "seconds, or 'default'")
	c.Flags().StringVar(&timeout, "queue-timeout-hours", "", "hours, or 'default'")
	c.Flags().BoolVar(&unenforced, "allow-unenforced-memory", false, "memory-claiming jobs may run where memory limits are not enforced")
	c.Flags().BoolVar(&network, "allow-network", false, "its jobs may ask for a network")
	c.Flags().StringArrayVar(&images, "image", nil, "the pool's images, replacing its list (repeat it)")
	c.Flags().BoolVar(&clearImages, "clear-images", false, "the pool lists no images")
	return c
}

// changed is whether the running command's flag was given.
func (a *app) changed(flag string) bool { return a.running != nil && a.running.Flags().Changed(flag) }

// setting reads a pool setting's flag: a number, "default", or nothing.
func setting(flag, v string) (n *int, reset bool, err error) {
	switch v {
	case "":
		return nil, false, nil
	case "default":
		return nil, true, nil
	}
	i, err := strconv.Atoi(v)
	if err != nil {
		return nil, false, fmt.Errorf("--%s: a number, or 'default'", flag)
	}
	return &i, false, nil
}

func optInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

// printSecret writes a token alone on stdout (so that `> file` keeps
// only it), and what it is on stderr; -o json or yaml prints the whole
// answer instead.
func (a *app) printSecret(v any, token, about string) error {
	if a.flags.output != "table" {
		return a.print(v, view{})
	}
	fmt.Fprintln(a.stderr, about)
	_, err := fmt.Fprintln(a.stdout, token)
	return err
}

func (a *app) createAdminTokenCommand() *cobra.Command {
	var name, role, org string
	var ttl time.Duration
	c := operation(&cobra.Command{
		Use: "create-admin-token", Short: "Create an admin and its first token; prints the token once", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			in := api.CreateAdminTokenInput{Name: name, Role: api.Role(strings.ToUpper(role)), OrganisationId: opt(org), TtlSeconds: optInt(int(ttl.Seconds()))}
			out, err := call(cmd.Context(), a, func(ctx context.Context, c graphql.Client) (*api.CreateAdminTokenResponse, error) {
				return api.CreateAdminToken(ctx, c, in)
			})
			if err != nil {
				return err
			}
			t := out.CreateAdminToken
			return a.printSecret(out, t.Token, fmt.Sprintf("token %s of %s (%s); shown once, store it now", t.TokenId, t.Admin.Name, t.Admin.Role))
		},
	}, "Mutation.createAdminToken")
	c.Flags().StringVar(&name, "name", "", "who the admin is")
	c.Flags().StringVar(&role, "role", "", "PLATFORM_ADMIN, ORG_ADMIN or ORG_MEMBER")
	c.Flags().StringVar(&org, "organisation", "", "the organisation's id (organisation roles)")
	c.Flags().DurationVar(&ttl, "ttl", 0, "the token's lifetime (0: until revoked)")
	_ = c.MarkFlagRequired("name")
	_ = c.MarkFlagRequired("role")
	return c
}

func (a *app) issueAdminTokenCommand() *cobra.Command {
	var ttl time.Duration
	c := operation(&cobra.Command{
		Use: "issue-admin-token ADMIN-ID", Short: "Make one more token for an admin (to replace one that leaked); prints it once", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := call(cmd.Context(), a, func(ctx context.Context, c graphql.Client) (*api.IssueAdminTokenResponse, error) {
				return api.IssueAdminToken(ctx, c, args[0], optInt(int(ttl.Seconds())))
			})
			if err != nil {
				return err
			}
			t := out.IssueAdminToken
			return a.printSecret(out, t.Token, fmt.Sprintf("token %s of %s; shown once, store it now", t.TokenId, t.Admin.Name))
		},
	}, "Mutation.issueAdminToken")
	c.Flags().DurationVar(&ttl, "ttl", 0, "the token's lifetime (0: until revoked)")
	return c
}

func (a *app) createEnrolmentTokenCommand() *cobra.Command {
	var pool string
	var ttl time.Duration
	c := operation(&cobra.Command{
		Use:   "create-enrolment-token",
		Short: "A single-use token for one runner to enrol with; prints only the token (> enrol.token)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			id, err := a.poolID(cmd.Context(), pool)
			if err != nil {
				return err
			}
			out, err := call(cmd.Context(), a, func(ctx context.Context, c graphql.Client) (*api.CreateEnrolmentTokenResponse, error) {
				return api.CreateEnrolmentToken(ctx, c, id, int(ttl.Seconds()))
			})
			if err != nil {
				return err
			}
			t := out.CreateEnrolmentToken
			return a.printSecret(out, t.Token, fmt.Sprintf("enrolment token for pool %q, single use, expires %s", t.Pool.Name, t.ExpiresAt.UTC().Format(time.RFC3339)))
		},
	}, "Mutation.createEnrolmentToken")
	c.Flags().StringVar(&pool, "pool", "", "the pool (id or name)")
	c.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token stays usable")
	_ = c.MarkFlagRequired("pool")
	return c
}

func (a *app) createHoldCommand() *cobra.Command {
	var gpus int
	var reason string
	var d time.Duration
	c := a.single("create-hold RUNNER-ID", "Mutation.createHold", "Keep some of a runner's GPUs free of new work for a while", cobra.ExactArgs(1),
		func(ctx context.Context, c graphql.Client, args []string) (any, error) {
			return api.CreateHold(ctx, c, args[0], gpus, reason, int(d.Seconds()))
		})
	c.Flags().IntVar(&gpus, "gpus", 1, "how many GPUs")
	c.Flags().StringVar(&reason, "reason", "", "why (shown with the hold)")
	c.Flags().DurationVar(&d, "for", time.Hour, "how long")
	_ = c.MarkFlagRequired("reason")
	return c
}

// submitJobsCommand queues the jobs of a file: a JSON or YAML list of
// SubmitJobInput objects.
func (a *app) submitJobsCommand() *cobra.Command {
	var file string
	c := a.single("submit-jobs", "Mutation.submitJobs", "Queue up to 1,000 jobs of one pool from a JSON or YAML list of SubmitJobInput (--file, - for stdin)", cobra.NoArgs,
		func(ctx context.Context, c graphql.Client, _ []string) (any, error) {
			var r io.Reader = a.stdin
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return nil, err
				}
				defer f.Close()
				r = f
			}
			inputs, err := readInputs(r)
			if err != nil {
				return nil, err
			}
			return api.SubmitJobs(ctx, c, inputs)
		}, view{list: "submitJobs", cols: cols("ID=id", "STATE=state", "POOL=pool.name", "IMAGE=image")})
	c.Flags().StringVar(&file, "file", "-", "the list (- for stdin)")
	return c
}

// readInputs reads a list of job inputs, JSON or YAML (YAML is read
// through JSON, so both use the schema's field names).
func readInputs(r io.Reader) ([]api.SubmitJobInput, error) {
	b, err := io.ReadAll(io.LimitReader(r, 16<<20))
	if err != nil {
		return nil, err
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("the jobs file: %w", err)
	}
	j, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("the jobs file: %w", err)
	}
	var inputs []api.SubmitJobInput
	dec := json.NewDecoder(strings.NewReader(string(j)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&inputs); err != nil {
		return nil, fmt.Errorf("the jobs file: a list of SubmitJobInput: %w", err)
	}
	if len(inputs) == 0 {
		return nil, errors.New("the jobs file holds no job")
	}
	for i := range inputs {
		if inputs[i].Kind == "" {
			inputs[i].Kind = "default"
		}
		if inputs[i].MaxAttempts == 0 {
			inputs[i].MaxAttempts = 3
		}
		if inputs[i].Stdio == "" {
			inputs[i].Stdio = api.StdioLogs
		}
	}
	return inputs, nil
}
