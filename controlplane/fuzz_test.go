package controlplane_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"testing"
	"time"

	"github.com/runmesh/runmesh/runnerapi"
)

// fuzzRoutes are the runner listener's routes that parse a body, with one
// well-formed body each for a seed.
var fuzzRoutes = []struct {
	path string
	auth bool // sent with the runner's client certificate
	seed string
}{
	{runnerapi.PathEnrol, false, `{"token":"rmet_x","name":"gpu-1","public_key":"AAAA","csr":"","capacity":{"cores":1,"memory_mib":1024}}`},
	{runnerapi.PathHeartbeat, true, `{"agent_version":"1","capacity":{"cores":8,"memory_mib":65536},"leases":[{"lease_id":"00000000-0000-0000-0000-000000000000","attempt":1,"phase":"RUNNING"}]}`},
	{runnerapi.PathLeases, true, `{"kinds":["default"],"largest":{"cores":1},"free":{"cores":1},"max":1,"wait_seconds":0}`},
	{runnerapi.PathResults, true, `{"results":[{"lease_id":"00000000-0000-0000-0000-000000000000","attempt":1,"exit_code":0}]}`},
	{runnerapi.PathLeaseResult("00000000-0000-0000-0000-000000000000"), true, `{"attempt":1,"return_reason":"x"}`},
	{runnerapi.PathLeaseLogs("00000000-0000-0000-0000-000000000000"), true, `{"attempt":1,"seq":0,"data":"aGk="}`},
	{"/v1/enrol/00000000-0000-0000-0000-000000000000/wait", false, `{"timestamp":"2026-12-02T00:00:00Z","signature":"AAAA"}`},
	{"/revoke", false, `{"serial":"1234","reasonCode":1}`},
	{"/sign", false, `{"csr":"x","ott":"y"}`},
	{"/renew", true, ``},
}

// Whatever a body holds, on whichever route, the runner listener answers
// it with a 4xx (or success) in its error format, never a 5xx: a request
// the server could not parse or refuses is the sender's fault, and a
// panic or an internal error on one is a defect. The fuzz engine gets a
// real server, database and CA, and a runner's client certificate.
func FuzzRunnerAPI(f *testing.F) {
	b := setup(f)
	_, c, _ := b.approvedRunner(f, measured(0))
	anon := b.client(nil)
	c.Timeout, anon.Timeout = 5*time.Second, 5*time.Second
	for i, r := range fuzzRoutes {
		f.Add(uint8(i), []byte(r.seed))
		f.Add(uint8(i), []byte(`{}`))
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := fuzzRoutes[int(route)%len(fuzzRoutes)]
		client := anon
		if r.auth {
			client = c
		}
		resp, err := client.Post(b.runnerURL+r.path, "application/json", bytes.NewReader(body))
		var uerr *url.Error
		if errors.As(err, &uerr) && uerr.Timeout() {
			return // a long poll holding on: an answer to come, not a failure
		}
		if err != nil {
			t.Fatalf("%s: %v", r.path, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 500 {
			t.Fatalf("%s answered %d to %q: %s", r.path, resp.StatusCode, body, raw)
		}
		if resp.StatusCode >= 400 && !json.Valid(raw) {
			t.Fatalf("%s answered %d, not in JSON: %q", r.path, resp.StatusCode, raw)
		}
	})
}
