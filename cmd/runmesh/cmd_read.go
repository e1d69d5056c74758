package main

import (
	"context"
	"strings"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/spf13/cobra"

	"github.com/runmesh/runmesh/cmd/runmesh/internal/api"
)

// readCommands are the commands of the schema's queries.
func (a *app) readCommands() []*cobra.Command {
	return []*cobra.Command{
		a.single("viewer", "Query.viewer", "Who the token belongs to, and its tokens", cobra.NoArgs,
			func(ctx context.Context, c graphql.Client, _ []string) (any, error) { return api.Viewer(ctx, c) }),
		a.single("organisations", "Query.organisations", "The organisations you may see", cobra.NoArgs,
			func(ctx context.Context, c graphql.Client, _ []string) (any, error) { return api.Organisations(ctx, c) },
			view{list: "organisations", cols: cols("ID=id", "NAME=name", "CREATED=createdAt")}),
		a.single("organisation ID", "Query.organisation", "One organisation, with its pools", cobra.ExactArgs(1),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.Organisation(ctx, c, args[0])
			}),
		a.poolsCommand(),
		a.single("pool ID", "Query.pool", "One pool: settings, queue, holds", cobra.ExactArgs(1),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.Pool(ctx, c, args[0])
			}),
		a.runnersCommand(),
		a.single("runner ID", "Query.runner", "One runner: capacity, GPUs, labels, health, holds", cobra.ExactArgs(1),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.Runner(ctx, c, args[0])
			}),
		a.single("ca", "Query.certificateAuthority", "The CA fingerprint runners pin when they enrol", cobra.NoArgs,
			func(ctx context.Context, c graphql.Client, _ []string) (any, error) {
				return api.CertificateAuthority(ctx, c)
			}),
		a.jobsCommand(),
		a.single("job ID", "Query.job", "One job: state, claim, events, runs, logs", cobra.ExactArgs(1),
			func(ctx context.Context, c graphql.Client, args []string) (any, error) {
				return api.Job(ctx, c, args[0])
			}),
		a.auditCommand(),
		a.single("health", "Query.health", "The health of the control-plane replica that answers", cobra.NoArgs,
			func(ctx context.Context, c graphql.Client, _ []string) (any, error) { return api.Health(ctx, c) },
			view{list: "health", cols: cols("NAME=name", "OK=ok", "SEVERITY=severity", "TITLE=title", "SINCE=since")}),
		a.adminsCommand(),
		a.enrolmentTokensCommand(),
		a.runsCommand(),
	}
}

// single is a command of one query whose answer needs no paging; views
// (at most one) make a list of it a table.
func (a *app) single(use, op, short string, args cobra.PositionalArgs, fetch func(context.Context, graphql.Client, []string) (any, error), views ...view) *cobra.Command {
	var w view
	if len(views) > 0 {
		w = views[0]
	}
	return operation(&cobra.Command{
		Use: use, Short: short, Args: args,
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := call(cmd.Context(), a, func(ctx context.Context, c graphql.Client) (*any, error) {
				v, err := fetch(ctx, c, args)
				return &v, err
			})
			if err != nil {
				return err
			}
			return a.print(*out, w)
		},
	}, op)
}

// pager is a list command's paging flags.
type pager struct {
	first int
	after string
	all   bool
}

func (p *pager) register(c *cobra.Command, first int) {
	c.Flags().IntVar(&p.first, "first", first, "how many items a page holds")
	c.Flags().StringVar(&p.after, "after", "", "start after this cursor (a page's endCursor)")
	c.Flags().BoolVar(&p.all, "all", false, "every page, one after another")
}

// paged is a command of one connection query: fetch gets one page, and
// list names the connection in the answer (e.g. "jobs").
func (a *app) paged(use, op, short string, first int, list string, w view, fetch func(ctx context.Context, c graphql.Client, first int, after *string) (any, error)) (*cobra.Command, *pager) {
	p := &pager{}
	c := operation(&cobra.Command{
		Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var after *string
			if p.after != "" {
				after = &p.after
			}
			var doc any
			for {
				out, err := call(cmd.Context(), a, func(ctx context.Context, c graphql.Client) (*any, error) {
					v, err := fetch(ctx, c, p.first, after)
					return &v, err
				})
				if err != nil {
					return err
				}
				page, err := generic(*out)
				if err != nil {
					return err
				}
				doc = merge(doc, page, list)
				more, _ := lookup(page, list+".pageInfo.hasNextPage").(bool)
				if !p.all || !more {
					return a.print(doc, view{list: list + ".nodes", cols: w.cols})
				}
				end, _ := lookup(page, list+".pageInfo.endCursor").(string)
				after = &end
			}
		},
	}, op)
	p.register(c, first)
	return c, p
}

// merge appends page's nodes of the connection list to doc's, and takes
// page's pageInfo.
func merge(doc, page any, list string) any {
	if doc == nil {
		return page
	}
	key, _, _ := strings.Cut(list, ".")
	d, p := doc.(map[string]any)[key].(map[string]any), page.(map[string]any)[key].(map[string]any)
	d["nodes"] = append(d["nodes"].([]any), p["nodes"].([]any)...)
	d["pageInfo"] = p["pageInfo"]
	return doc
}

func (a *app) poolsCommand() *cobra.Command {
	var org string
	var platform bool
	c := a.single("pools", "Query.pools", "The pools you may see", cobra.NoArgs,
		func(ctx context.Context, c graphql.Client, _ []string) (any, error) {
			return api.Pools(ctx, c, opt(org), &platform)
		},
		view{list: "pools", cols: cols("ID=id", "NAME=name", "ORGANISATION=organisation.name", "LEASE S=leaseSeconds.inForce", "QUEUED=queued", "HELD GPUS=heldGpus", "RUNNER SEEN=runnerSeen")})
	c.Flags().StringVar(&org, "organisation", "", "only this organisation's (id)")
	c.Flags().BoolVar(&platform, "platform", false, "only the platform's own pools")
	return c
}

func (a *app) runnersCommand() *cobra.Command {
	var pool, status, label string
	c, _ := a.paged("runners", "Query.runners", "Runners, oldest enrolment first", 100, "runners",
		view{cols: cols("ID=id", "NAME=name", "POOL=pool.name", "STATUS=status", "ONLINE=online", "TAKING WORK=takingWork", "CORES=capacity.cores", "GPUS=gpus.index", "FINGERPRINT=fingerprintHint", "REASON=statusReason")},
		func(ctx context.Context, c graphql.Client, first int, after *string) (any, error) {
			poolID, err := a.optPool(ctx, pool)
			if err != nil {
				return nil, err
			}
			return api.Runners(ctx, c, poolID, optEnum[api.RunnerStatus](status), opt(label), first, after)
		})
	c.Flags().StringVar(&pool, "pool", "", "only this pool's (id or name)")
	c.Flags().StringVar(&status, "status", "", "PENDING, APPROVED, REJECTED or REVOKED")
	c.Flags().StringVar(&label, "label", "", "a label the runner reported: key=value, or a key")
	_ = c.RegisterFlagCompletionFunc("status", cobra.FixedCompletions([]string{"PENDING", "APPROVED", "REJECTED", "REVOKED"}, cobra.ShellCompDirectiveNoFileComp))
	return c
}

func (a *app) jobsCommand() *cobra.Command {
	var pool, state, kind string
	var since, until time.Time
	c, _ := a.paged("jobs", "Query.jobs", "Jobs, newest first", 50, "jobs",
		view{cols: cols("ID=id", "POOL=pool.name", "STATE=state", "KIND=kind", "ATTEMPT=attempt", "IMAGE=image", "SUBMITTED=submittedAt", "REASON=stateReason")},
		func(ctx context.Context, c graphql.Client, first int, after *string) (any, error) {
			poolID, err := a.optPool(ctx, pool)
			if err != nil {
				return nil, err
			}
			return api.Jobs(ctx, c, poolID, optEnum[api.JobState](state), opt(kind), optTime(since), optTime(until), first, after)
		})
	c.Flags().StringVar(&pool, "pool", "", "only this pool's (id or name)")
	c.Flags().StringVar(&state, "state", "", "QUEUED, LEASED, RUNNING, SUCCEEDED, FAILED, CANCELLED, EXPIRED or BLOCKED")
	c.Flags().StringVar(&kind, "kind", "", "only jobs of this kind")
	c.Flags().Var(timeFlag{&since}, "since", "submitted at or after (RFC 3339, or a duration ago: 1h)")
	c.Flags().Var(timeFlag{&until}, "until", "submitted before (RFC 3339, or a duration ago)")
	_ = c.RegisterFlagCompletionFunc("state", cobra.FixedCompletions([]string{"QUEUED", "LEASED", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED", "BLOCKED"}, cobra.ShellCompDirectiveNoFileComp))
	return c
}

func (a *app) auditCommand() *cobra.Command {
	var action, actor string
	c, _ := a.paged("audit-log", "Query.auditLog", "What admins did, newest first (platform admins)", 50, "auditLog",
		view{cols: cols("ID=id", "AT=at", "ACTOR=actorName", "ROLE=actorRole", "ACTION=action", "OUTCOME=outcome", "DETAIL=detail")},
		func(ctx context.Context, c graphql.Client, first int, after *string) (any, error) {
			return api.AuditLog(ctx, c, opt(action), opt(actor), first, after)
		})
	c.Flags().StringVar(&action, "action", "", "only this action, e.g. createPool")
	c.Flags().StringVar(&actor, "actor", "", "only this admin's (id)")
	return c
}

func (a *app) adminsCommand() *cobra.Command {
	var org string
	c, _ := a.paged("admins", "Query.admins", "Admins and their tokens, oldest first (organisation and platform admins)", 100, "admins",
		view{cols: cols("ID=id", "NAME=name", "ROLE=role", "ORGANISATION=organisation.name", "CREATED=createdAt", "TOKENS=tokens.id", "LIVE=tokens.live", "LAST USED=tokens.lastUsedAt")},
		func(ctx context.Context, c graphql.Client, first int, after *string) (any, error) {
			return api.Admins(ctx, c, opt(org), first, after)
		})
	c.Flags().StringVar(&org, "organisation", "", "only this organisation's (id)")
	return c
}

func (a *app) enrolmentTokensCommand() *cobra.Command {
	var pool, state string
	c, _ := a.paged("enrolment-tokens", "Query.enrolmentTokens", "Enrolment tokens, newest first, and the runner that used each", 100, "enrolmentTokens",
		view{cols: cols("ID=id", "POOL=pool.name", "STATE=state", "CREATED BY=createdBy.name", "CREATED=createdAt", "EXPIRES=expiresAt", "RUNNER=runner.name")},
		func(ctx context.Context, c graphql.Client, first int, after *string) (any, error) {
			poolID, err := a.optPool(ctx, pool)
			if err != nil {
				return nil, err
			}
			return api.EnrolmentTokens(ctx, c, poolID, optEnum[api.EnrolmentTokenState](state), first, after)
		})
	c.Flags().StringVar(&pool, "pool", "", "only this pool's (id or name)")
	c.Flags().StringVar(&state, "state", "", "LIVE, USED, EXPIRED or REVOKED")
	return c
}

func (a *app) runsCommand() *cobra.Command {
	var org, pool string
	c, _ := a.paged("runs", "Query.runs", "Ended attempts, newest first", 50, "runs",
		view{cols: cols("JOB=job.id", "ATTEMPT=attempt", "POOL=job.pool.name", "RUNNER=runnerName", "LEASED=leasedAt", "FINISHED=finishedAt", "EXIT=exitCode", "RETURNED=returnReason")},
		func(ctx context.Context, c graphql.Client, first int, after *string) (any, error) {
			poolID, err := a.optPool(ctx, pool)
			if err != nil {
				return nil, err
			}
			return api.Runs(ctx, c, opt(org), poolID, first, after)
		})
	c.Flags().StringVar(&org, "organisation", "", "only this organisation's (id)")
	c.Flags().StringVar(&pool, "pool", "", "only this pool's (id or name)")
	return c
}

// optPool is a pool flag's id, or nil when it is empty.
func (a *app) optPool(ctx context.Context, pool string) (*string, error) {
	if pool == "" {
		return nil, nil
	}
	id, err := a.poolID(ctx, pool)
	return &id, err
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optEnum[E ~string](s string) *E {
	if s == "" {
		return nil
	}
	e := E(strings.ToUpper(s))
	return &e
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// timeFlag reads a time as RFC 3339 or as a duration before now.
type timeFlag struct{ t *time.Time }

func (f timeFlag) String() string {
	if f.t == nil || f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f timeFlag) Set(s string) error {
	if d, err := time.ParseDuration(s); err == nil {
		*f.t = time.Now().Add(-d)
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	*f.t = t
	return nil
}

func (timeFlag) Type() string { return "time" }
