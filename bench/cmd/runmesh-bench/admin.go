package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/runmesh/runmesh/pki"
	"github.com/runmesh/runmesh/runnerapi"
)

// admin is the admin API as a benchmark reaches it: GraphQL over HTTP with
// a bearer token, as any administrator's client does.
type admin struct {
	url   string // the admin listener's base URL
	token string
}

func (a admin) gql(ctx context.Context, query string, vars map[string]any) (json.RawMessage, error) {
	var out struct {
		Data   json.RawMessage
		Errors []struct{ Message string }
	}
	b, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url+"/graphql", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("graphql: %s: %w", resp.Status, err)
	}
	if len(out.Errors) > 0 {
		return nil, fmt.Errorf("graphql: %s", out.Errors[0].Message)
	}
	return out.Data, nil
}

// createPool creates a platform pool and returns its id.
func (a admin) createPool(ctx context.Context, name string) (string, error) {
	data, err := a.gql(ctx, `mutation($n: String!) { createPool(input: {name: $n}) { id } }`, map[string]any{"n": name})
	if err != nil {
		return "", err
	}
	var p struct{ CreatePool struct{ ID string } }
	if err := json.Unmarshal(data, &p); err != nil {
		return "", err
	}
	return p.CreatePool.ID, nil
}

// enrolFleet enrols n runners into the pool the way a fleet joins: for
// each, a single-use token from the admin API, the enrolment over the
// runner API with the capacity it measured, the approval by its
// fingerprint, and the certificate received on its long-poll. It runs
// parallel of them at a time, and returns each runner's id and client
// certificate.
func enrolFleet(ctx context.Context, a admin, poolID, runnerURL string, anon *http.Client, n, parallel int, capacity runnerapi.Capacity) ([]string, []*tls.Certificate, error) {
	ids, certs := make([]string, n), make([]*tls.Certificate, n)
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for firstErr.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				r, err := enrolOne(ctx, a, poolID, anon, runnerURL, fmt.Sprintf("sim-%d", i), capacity)
				if err == nil {
					err = approve(ctx, a, r.id, pki.KeyFingerprint(r.key.Public().(ed25519.PublicKey)))
				}
				if err == nil {
					res := r.wait(ctx, anon, runnerURL)
					err = res.err
					ids[i], certs[i] = r.id, res.cert
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("enrol runner %d: %w", i, err))
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return nil, nil, err
	}
	return ids, certs, nil
}
