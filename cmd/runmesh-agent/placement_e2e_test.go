package main_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/cmd/internal/e2e"
)

// placementSubtests: the agent reports its declared and detected labels
// and the kinds it asks for; a job whose selector they meet runs on it;
// one whose selector no runner meets, and one of a kind no runner runs,
// wait BLOCKED, each saying why, until cancelled.
func placementSubtests(t *testing.T, srv e2e.Dev, runnerID string, submit func(string, []string, int, map[string]any) string,
	waitState func(string, time.Duration, ...string) map[string]any, image string,
) {
	r := srv.GraphQL(t, `query($id: ID!) { runner(id: $id) { labels { key value source } kinds } }`,
		map[string]any{"id": runnerID})["runner"].(map[string]any)
	require.Contains(t, r["labels"], map[string]any{"key": "zone", "value": "sandbox", "source": "DECLARED"})
	require.Contains(t, r["labels"], map[string]any{"key": "runmesh.io/os", "value": "linux", "source": "DETECTED"})
	require.Equal(t, []any{"default"}, r["kinds"])

	ran := waitState(submit(image, []string{"true"}, 60, map[string]any{"selector": "zone=sandbox,runmesh.io/os in (linux),!spot"}),
		90*time.Second, "SUCCEEDED", "FAILED")
	require.Equal(t, "SUCCEEDED", ran["state"], ran["stateReason"])

	elsewhere := submit(image, []string{"true"}, 60, map[string]any{"selector": "zone in (elsewhere)"})
	batch := submit(image, []string{"true"}, 60, map[string]any{"kind": "batch"})
	defer srv.GraphQL(t, `mutation($a: ID!, $b: ID!) { a: cancelJob(id: $a) { id } b: cancelJob(id: $b) { id } }`,
		map[string]any{"a": elsewhere, "b": batch})
	j := waitState(elsewhere, 60*time.Second, "BLOCKED", "SUCCEEDED", "FAILED")
	require.Equal(t, `no approved runner of the pool that runs kind "default" matches its selector zone in (elsewhere)`, j["stateReason"])
	require.Empty(t, j["runs"], "never leased")
	j = waitState(batch, 60*time.Second, "BLOCKED", "SUCCEEDED", "FAILED")
	require.Equal(t, `no approved runner of the pool runs jobs of kind "batch"`, j["stateReason"])
}
