package runnerclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/runmesh/runmesh/runnerapi"
)

// A lease answer may be as large as the leases asked for; every other
// answer is bounded to 4 MiB.
func TestAnswersAreBoundedByWhatWasAskedFor(t *testing.T) {
	// One lease with an env of 5 MiB: more than any other answer may be.
	big := runnerapi.LeaseResponse{Leases: []runnerapi.Lease{{LeaseID: "l", Env: map[string]string{"X": strings.Repeat("x", 5<<20)}}}}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(big)
	}))
	defer srv.Close()
	c, err := Anonymous(srv.URL, srv.Certificate())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var out runnerapi.LeaseResponse
	if err := c.Do(ctx, http.MethodGet, "/other", nil, &out); err == nil || !strings.Contains(err.Error(), "over 4194304 bytes") {
		t.Fatalf("a 5 MiB answer to another request: %v, want refused", err)
	}
	leases, err := c.Lease(ctx, runnerapi.LeaseRequest{Max: 16})
	if err != nil || len(leases) != 1 {
		t.Fatalf("a 5 MiB answer to a request for 16 leases: %v, %d leases", err, len(leases))
	}
	if _, err := c.Lease(ctx, runnerapi.LeaseRequest{Max: 1}); err == nil || !strings.Contains(err.Error(), "bytes") {
		t.Fatalf("a 5 MiB answer to a request for one lease: %v, want refused", err)
	}
}
