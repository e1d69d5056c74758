package graph_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/graph"
	"github.com/runmesh/runmesh/internal/health"
)

func TestHealthListsTheServingReplicasConditions(t *testing.T) {
	t.Parallel()
	reg := health.NewRegistry()
	reg.Register("database", "database reachable", health.Error).SetHealthy("answers")
	reg.Register("certificates_expiring", "certificates not near expiry", health.Warning).
		SetUnhealthy("CA intermediate expires at 2030-01-01T00:00:00Z")
	b := setup(t, func(o *graph.Options) { o.Health = reg })
	const q = `{ health { name ok severity title text since } }`

	r := b.do(t, b.platform, q, nil)
	require.Empty(t, r.Errors, r.Raw)
	got := r.Data["health"].([]any)
	require.Len(t, got, 2)
	since := reg.Conditions()[0].Since.Format(time.RFC3339Nano)
	require.Equal(t, map[string]any{"name": "database", "ok": true, "severity": "error", "title": "database reachable",
		"text": "answers", "since": since}, got[0])
	require.Equal(t, map[string]any{"name": "certificates_expiring", "ok": false, "severity": "warning",
		"title": "certificates not near expiry", "text": "CA intermediate expires at 2030-01-01T00:00:00Z",
		"since": reg.Conditions()[1].Since.Format(time.RFC3339Nano)}, got[1])

	// Every admin sees the verdicts; the texts, which can name the
	// platform's hosts, only platform admins.
	for _, token := range []string{b.adminA, b.memberA} {
		r = b.do(t, token, q, nil)
		require.Empty(t, r.Errors, r.Raw)
		got = r.Data["health"].([]any)
		require.Len(t, got, 2)
		for _, c := range got {
			require.Nil(t, c.(map[string]any)["text"], r.Raw)
		}
		require.Equal(t, "database", got[0].(map[string]any)["name"])
		require.Equal(t, false, got[1].(map[string]any)["ok"])
	}

	require.Equal(t, 401, b.do(t, "", q, nil).Status)
}

func TestHealthWithoutARegistryIsEmpty(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, b.memberA, `{ health { name } }`, nil)
	require.Empty(t, r.Errors, r.Raw)
	require.Equal(t, []any{}, r.Data["health"])
}
