package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Named contexts: the token goes from stdin into a 0600 file, never into
// argv or the config; a token file others can read is refused.
func TestContextsKeepTheTokenInAPrivateFile(t *testing.T) {
	t.Parallel()
	b := newCLIBundle(t)
	env, err := os.ReadFile(b.envFile)
	require.NoError(t, err)
	token := strings.TrimPrefix(strings.Split(string(env), "\n")[1], "RUNMESH_ADMIN_TOKEN=")
	cfg := filepath.Join(t.TempDir(), "config.yaml")

	_, errOut, err := b.cliContext(context.Background(), token+"\n", "--config", cfg, "config", "set-context", "dev", "--server", b.url, "--token-stdin")
	require.NoError(t, err, errOut)
	tokenFile := filepath.Join(filepath.Dir(cfg), "dev.token")
	for _, p := range []string{cfg, tokenFile} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), p)
	}
	written, err := os.ReadFile(cfg)
	require.NoError(t, err)
	require.NotContains(t, string(written), token, "the config names the token file, never the token")

	out, errOut, err := b.cliContext(context.Background(), "", "--config", cfg, "viewer")
	require.NoError(t, err, errOut)
	require.Contains(t, out, "role: PLATFORM_ADMIN", "the current context")
	out, _, err = b.cliContext(context.Background(), "", "--config", cfg, "config", "get-contexts")
	require.NoError(t, err)
	require.Regexp(t, `\* +dev +`+b.url, out)

	require.NoError(t, os.Chmod(tokenFile, 0o644))
	_, _, err = b.cliContext(context.Background(), "", "--config", cfg, "viewer")
	require.ErrorContains(t, err, "is readable by others (mode 0644)")
	_, _, err = b.cliContext(context.Background(), "", "--config", cfg, "--context", "prod", "viewer")
	require.ErrorContains(t, err, `no context named "prod"`)
	_, _, err = b.cliContext(context.Background(), "", "--config", cfg, "--token-file", b.envFile+".missing", "viewer")
	require.Error(t, err)
	_, _, err = b.cliContext(context.Background(), "", "--config", filepath.Join(t.TempDir(), "none.yaml"), "viewer")
	require.ErrorContains(t, err, "no admin API")
}

func TestOutputFormatsPagingAndCompletion(t *testing.T) {
	t.Parallel()
	b := newCLIBundle(t)
	for _, name := range []string{"a", "b", "c"} {
		b.ok("create-organisation", "org-"+name)
	}
	out := b.ok("-o", "yaml", "organisations")
	require.Contains(t, out, "    name: org-b\n")
	require.Contains(t, b.ok("-o", "json", "organisations"), `"organisations": [`)
	_, _, err := b.cli("", "-o", "xml", "organisations")
	require.ErrorContains(t, err, "--output: table, json or yaml")

	// Audit entries a page at a time: a hint names the next page; --all
	// reads every page.
	_, errOut, err := b.cli("", "audit-log", "--first", "2")
	require.NoError(t, err)
	require.Regexp(t, `more follow: --after \S+ \(or --all\)`, errOut)
	cursor := strings.Fields(errOut)[3]
	out = b.ok("audit-log", "--first", "2", "--after", cursor)
	require.Contains(t, out, "createOrganisation")
	out = b.ok("audit-log", "--first", "1", "--all")
	require.Equal(t, 4, strings.Count(out, "\n"), "a header and the three entries: %s", out)

	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, _, err := b.cliContext(context.Background(), "", "completion", shell)
		require.NoError(t, err)
		require.Contains(t, out, "runmesh", shell)
	}
}
