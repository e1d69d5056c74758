// Command runmesh is the admin CLI: a client of the admin GraphQL API,
// generated from the operations in operations/ (genqlient), with a command
// for every query, mutation and subscription of the schema.
//
// Where the API is and which token to send come from a named context in
// the config file (runmesh config), an env file (--env-file, e.g. the
// dev.env that `runmesh-server dev` writes) or the environment
// (RUNMESH_ADMIN_URL, RUNMESH_ADMIN_TOKEN). A token is never taken from the
// command line, where every user of the host could read it: it comes from
// a file only its owner can read, or from the environment.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	var exit exitCode
	switch {
	case errors.As(err, &exit):
		os.Exit(int(exit))
	case err != nil:
		fmt.Fprintln(os.Stderr, "runmesh:", err)
		os.Exit(1)
	}
}

// exitCode ends the CLI with that status and nothing more to say (submit-job
// --wait: the job's own exit code).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// run is the CLI on args, with its streams and environment given, until
// it is done or interrupted.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return runContext(ctx, args, stdin, stdout, stderr, getenv)
}

// runContext is run until ctx ends (tests run the CLI in process).
func runContext(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) error {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	root := a.root()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	return root.ExecuteContext(ctx)
}

// root is the runmesh command with every subcommand.
func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "runmesh",
		Short: "Administer a runmesh control plane through its GraphQL API",
		Long: `runmesh administers a runmesh control plane through its GraphQL API: organisations, pools,
admins and tokens, runners and their approval, jobs, holds, and what happened (audit log, runs).

Lists print as tables and single objects as YAML; -o json or -o yaml prints the API's answer.
Lists are paged: --first N and --after CURSOR, or --all.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			a.running = cmd
			return a.flags.check()
		},
	}
	a.flags.register(root)
	root.AddGroup(&cobra.Group{ID: "read", Title: "Read:"}, &cobra.Group{ID: "change", Title: "Change:"},
		&cobra.Group{ID: "follow", Title: "Follow:"}, &cobra.Group{ID: "session", Title: "Work on a running job:"}, &cobra.Group{ID: "cli", Title: "The CLI itself:"})
	for _, c := range a.readCommands() {
		c.GroupID = "read"
		root.AddCommand(c)
	}
	for _, c := range a.changeCommands() {
		c.GroupID = "change"
		root.AddCommand(c)
	}
	for _, c := range a.followCommands() {
		c.GroupID = "follow"
		root.AddCommand(c)
	}
	for _, c := range a.sessionCommands() {
		c.GroupID = "session"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.configCommand(), a.versionCommand(), a.queryCommand()} {
		c.GroupID = "cli"
		root.AddCommand(c)
	}
	root.SetHelpCommandGroupID("cli")
	root.SetCompletionCommandGroupID("cli")
	return root
}

// operation marks a command as the one for a root field of the schema,
// e.g. "Query.jobs" (the CLI's tests check every field has one).
func operation(c *cobra.Command, field string) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations["operation"] = field
	return c
}
