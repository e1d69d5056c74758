package controlplane_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/runnerapi"
)

// TestPoolImages: a pool's images are checked when saved (a refusal saves
// nothing), named to its runners in every heartbeat answer, shown per
// runner and per pool as the runners report them, and a job naming one a
// runner cannot run is not leased to it.
func TestPoolImages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pin := "sha256:" + strings.Repeat("a", 64)
	update := func(images any) string {
		_, code := b.gql(t, b.platform, `mutation($id: ID!, $im: [String!]) { updatePool(input: {id: $id, images: $im}) { id } }`,
			map[string]any{"id": b.poolA.ID, "im": images})
		return code
	}
	for name, images := range map[string][]string{
		"a pin that is no sha256":  {"localhost/a:1@sha256:xyz"},
		"an image like a flag":     {"--privileged"},
		"the same reference twice": {"localhost/a:1", "localhost/a:1@" + pin},
	} {
		require.Equal(t, "BAD_INPUT", update(images), name)
	}
	var many []string
	for i := range runnerapi.MaxPoolImages + 1 {
		many = append(many, "localhost/img:"+strings.Repeat("x", i+1))
	}
	require.Equal(t, "BAD_INPUT", update(many))
	require.Equal(t, 0, b.count(t, "SELECT count(*) FROM pools WHERE cardinality(images) > 0"), "refusals save nothing")

	list := []string{"localhost/busybox:latest", "registry.example/private:1@" + pin}
	require.Empty(t, update(list))
	id, c, _ := b.approvedRunner(t, measured(0))
	report := measured(0)
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	report.Images = []runnerapi.ImageState{
		{Image: list[0], State: runnerapi.ImagePulled, Digest: "sha256:" + strings.Repeat("b", 64), At: at},
		{Image: list[1], State: runnerapi.ImageFailed, Error: "unauthorized: authentication required", At: at},
	}
	r := b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: report})
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	var resp runnerapi.HeartbeatResponse
	require.NoError(t, json.Unmarshal([]byte(r.Body), &resp))
	require.Equal(t, list, resp.PoolImages, "the answer names the pool's images")

	data, code := b.gql(t, b.platform, `query($id: ID!, $p: ID!) {
		runner(id: $id) { images { image state digest error at } }
		pool(id: $p) { images { image reference pinnedDigest runners { runner { id } state error } } } }`,
		map[string]any{"id": id, "p": b.poolA.ID})
	require.Empty(t, code)
	require.Equal(t, []any{
		map[string]any{"image": list[0], "state": "PULLED", "digest": report.Images[0].Digest, "error": nil, "at": "2026-12-02T12:00:00Z"},
		map[string]any{"image": list[1], "state": "FAILED", "digest": nil, "error": "unauthorized: authentication required", "at": "2026-12-02T12:00:00Z"},
	}, data["runner"].(map[string]any)["images"])
	pool := data["pool"].(map[string]any)["images"].([]any)
	require.Len(t, pool, 2)
	require.Equal(t, map[string]any{"image": list[1], "reference": "registry.example/private:1", "pinnedDigest": pin,
		"runners": []any{map[string]any{"runner": map[string]any{"id": id}, "state": "FAILED", "error": "unauthorized: authentication required"}}}, pool[1])

	// A pull under way shows its last progress line.
	report.Images[1] = runnerapi.ImageState{Image: list[1], State: runnerapi.ImagePulling, Progress: "Copying blob sha256:abc", At: at}
	r = b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: report})
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	data, code = b.gql(t, b.platform, `query($id: ID!) { runner(id: $id) { images { state progress } } }`, map[string]any{"id": id})
	require.Empty(t, code)
	require.Equal(t, []any{map[string]any{"state": "PULLED", "progress": nil}, map[string]any{"state": "PULLING", "progress": "Copying blob sha256:abc"}},
		data["runner"].(map[string]any)["images"])
	report.Images[1] = runnerapi.ImageState{Image: list[1], State: runnerapi.ImageFailed, Error: "unauthorized: authentication required", At: at}
	r = b.beat(t, c, runnerapi.HeartbeatRequest{Capacity: report})
	require.Equal(t, http.StatusOK, r.Status, r.Body)

	// A job naming an image the runner cannot run waits for another runner.
	private, code := b.submit(t, b.platform, jobInput(b.poolA.ID, func(in map[string]any) { in["image"] = "registry.example/private:1" }))
	require.Empty(t, code)
	plain, code := b.submit(t, b.platform, jobInput(b.poolA.ID))
	require.Empty(t, code)
	req := anyWork(0)
	req.Max = 4
	req.UnavailableImages = []string{"registry.example/private:1", list[1]}
	leases := b.lease(t, c, req)
	require.Len(t, leases, 1)
	require.Equal(t, plain, leases[0].LeaseID)
	req.UnavailableImages = nil
	leases = b.lease(t, c, req)
	require.Len(t, leases, 1)
	require.Equal(t, private, leases[0].LeaseID, "once the runner has it")
}
