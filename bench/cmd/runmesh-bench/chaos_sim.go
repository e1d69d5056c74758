package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/runmesh/runmesh/runnerapi"
)

// chaosSim is a fleet of simulated runners working a pool through every
// replica that answers, as agents do: a heartbeat each second naming the
// leases held, leases of a few jobs at a time, each job "run" for a while,
// then its result, sent twice (a lost answer's retry). It records what the
// server accepted, so that a job accepted twice or never shows.
type chaosSim struct {
	ctx     context.Context
	clients []*http.Client
	run     time.Duration // how long a simulated job runs

	mu       sync.Mutex
	addrs    []string // the replicas' runner listeners
	accepted map[string]int
	frozen   map[int]bool
	held     map[int]map[string]runnerapi.Lease
	ever     map[int]map[string]bool // every lease each runner was given
	errs     map[string]int
	last     time.Time // the latest accepted result
	forged   forgedCounts
}

type forgedCounts struct{ sent, accepted int }

func newChaosSim(ctx context.Context, certs []*tls.Certificate, roots *x509.CertPool, addrs []string, run time.Duration) *chaosSim {
	s := &chaosSim{ctx: ctx, run: run, addrs: addrs, accepted: map[string]int{}, frozen: map[int]bool{},
		held: map[int]map[string]runnerapi.Lease{}, ever: map[int]map[string]bool{}, errs: map[string]int{}}
	for i, c := range certs {
		s.clients = append(s.clients, &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4, TLSClientConfig: &tls.Config{
			RootCAs: roots, ServerName: "127.0.0.1",
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c, nil },
		}}})
		s.held[i], s.ever[i] = map[string]runnerapi.Lease{}, map[string]bool{}
	}
	return s
}

func (s *chaosSim) setAddrs(addrs []string) { s.mu.Lock(); s.addrs = addrs; s.mu.Unlock() }

// post sends one request to a replica, the next one on failure, and
// counts what went wrong by kind. ok: a 2xx answer, decoded into out.
func (s *chaosSim) post(i int, path string, in, out any) (status int, code string) {
	body, _ := json.Marshal(in)
	s.mu.Lock()
	addrs := append([]string(nil), s.addrs...)
	s.mu.Unlock()
	start := rand.IntN(len(addrs))
	for k := range addrs {
		url := "https://" + addrs[(start+k)%len(addrs)] + path
		req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return 0, "request"
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := s.clients[i].Do(req)
		if err != nil {
			s.count("connection refused or reset")
			continue
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 300 {
			if out != nil {
				_ = json.Unmarshal(raw, out)
			}
			return resp.StatusCode, ""
		}
		var e runnerapi.Error
		_ = json.Unmarshal(raw, &e)
		s.count(fmt.Sprintf("%d %s", resp.StatusCode, e.Error.Code))
		return resp.StatusCode, e.Error.Code
	}
	return 0, "unreachable"
}

func (s *chaosSim) count(kind string) { s.mu.Lock(); s.errs[kind]++; s.mu.Unlock() }

// start runs every runner until ctx ends: a heartbeat loop and a work
// loop each.
func (s *chaosSim) start(ctx context.Context, wg *sync.WaitGroup) {
	for i := range s.clients {
		s.post(i, runnerapi.PathHeartbeat, runnerapi.HeartbeatRequest{AgentVersion: "chaos", Capacity: simCapacity,
			Recovery: &runnerapi.RecoveryProof{AgentInstance: simInstance, BootID: "chaos", SurvivorsChecked: true, Isolated: true}}, nil)
		wg.Go(func() { s.heartbeats(ctx, i) })
		wg.Go(func() { s.work(ctx, i) })
	}
}

func (s *chaosSim) isFrozen(i int) bool { s.mu.Lock(); defer s.mu.Unlock(); return s.frozen[i] }

func (s *chaosSim) heartbeats(ctx context.Context, i int) {
	for ctx.Err() == nil {
		time.Sleep(time.Second)
		if s.isFrozen(i) {
			continue
		}
		s.mu.Lock()
		req := runnerapi.HeartbeatRequest{AgentVersion: "chaos", Capacity: simCapacity}
		for _, l := range s.held[i] {
			req.Leases = append(req.Leases, runnerapi.HeldLease{LeaseID: l.LeaseID, Attempt: l.Attempt, Phase: runnerapi.PhaseRunning})
		}
		s.mu.Unlock()
		var resp runnerapi.HeartbeatResponse
		if status, _ := s.post(i, runnerapi.PathHeartbeat, req, &resp); status == http.StatusOK {
			s.mu.Lock()
			for _, a := range resp.Leases {
				if a.Action == runnerapi.LeaseGone {
					delete(s.held[i], a.LeaseID) // taken back: an agent stops it
				}
			}
			s.mu.Unlock()
		}
	}
}

// work leases up to four jobs, runs them, and reports each result twice.
func (s *chaosSim) work(ctx context.Context, i int) {
	big := runnerapi.Resources{Cores: 64, MemoryMiB: 1 << 19}
	for ctx.Err() == nil {
		if s.isFrozen(i) {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var resp runnerapi.LeaseResponse
		status, _ := s.post(i, runnerapi.PathLeases, runnerapi.LeaseRequest{Kinds: []string{"default"}, Largest: big, Free: big, Max: 4,
			WaitSeconds: 1, AgentInstance: simInstance}, &resp)
		if status != http.StatusOK {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		for _, l := range resp.Leases {
			s.held[i][l.LeaseID], s.ever[i][l.LeaseID] = l, true
		}
		s.mu.Unlock()
		time.Sleep(s.run)
		for s.isFrozen(i) { // frozen mid-job: it reports when it thaws
			time.Sleep(100 * time.Millisecond)
		}
		for _, l := range resp.Leases {
			s.report(i, l)
		}
	}
}

// report sends a lease's result until the server answers it, then once
// more; a 200 that is not already_recorded is an acceptance.
func (s *chaosSim) report(i int, l runnerapi.Lease) {
	zero := 0
	for sent, tries := 0, 0; sent < 2 && tries < 100 && s.ctx.Err() == nil; tries++ {
		var resp runnerapi.ResultResponse
		status, _ := s.post(i, runnerapi.PathLeaseResult(l.LeaseID), runnerapi.ResultRequest{Attempt: l.Attempt, ExitCode: &zero}, &resp)
		switch {
		case status == http.StatusOK:
			if !resp.AlreadyRecorded {
				s.mu.Lock()
				s.accepted[l.LeaseID]++
				s.last = time.Now()
				s.mu.Unlock()
			}
			sent++
		case status == http.StatusConflict: // stale: the lease went to another
			sent = 2
		default:
			time.Sleep(200 * time.Millisecond)
			continue
		}
	}
	s.mu.Lock()
	delete(s.held[i], l.LeaseID)
	s.mu.Unlock()
}

// forge has runner i report a result for leases another runner holds:
// every one must be refused.
func (s *chaosSim) forge(i int) {
	s.mu.Lock()
	var victims []runnerapi.Lease
	for j, ls := range s.held {
		if j == i {
			continue
		}
		for _, l := range ls {
			victims = append(victims, l)
		}
	}
	s.mu.Unlock()
	zero := 0
	for _, l := range victims {
		status, _ := s.post(i, runnerapi.PathLeaseResult(l.LeaseID), runnerapi.ResultRequest{Attempt: l.Attempt, ExitCode: &zero}, nil)
		s.mu.Lock()
		s.forged.sent++
		if status == http.StatusOK {
			s.forged.accepted++
		}
		s.mu.Unlock()
	}
}

// leasesOf is every lease runner i was given (none for -1).
func (s *chaosSim) leasesOf(i int) map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for id := range s.ever[i] {
		out[id] = true
	}
	return out
}

func (s *chaosSim) freeze(i int, on bool) { s.mu.Lock(); s.frozen[i] = on; s.mu.Unlock() }

// resumed waits for the first result accepted after t, and returns how
// long after t it came.
func (s *chaosSim) resumed(t time.Time, within time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		last := s.last
		s.mu.Unlock()
		if last.After(t) {
			return last.Sub(t), nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, errors.New("no result accepted")
}

func (s *chaosSim) duplicates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.accepted {
		if c > 1 {
			n++
		}
	}
	return n
}

func (s *chaosSim) errorKinds() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, n := range s.errs {
		out = append(out, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(out)
	return out
}

// submitter submits jobs in batches through GraphQL, as an administrator's
// client would, retrying a batch the server could not take (an idempotency
// key per batch makes a retried one the same jobs).
type submitter struct {
	a    admin
	pool string

	mu    sync.Mutex
	jobs  []string
	done  bool
	batch int
}

func (s *submitter) run(ctx context.Context, per int, every time.Duration) {
	for ctx.Err() == nil {
		s.mu.Lock()
		done := s.done
		s.batch++
		n := s.batch
		s.mu.Unlock()
		if done {
			return
		}
		inputs := make([]map[string]any, per)
		for k := range inputs {
			inputs[k] = map[string]any{"poolId": s.pool, "image": "busybox", "command": []string{"true"},
				"claim": map[string]any{"cores": 1, "wallClockSeconds": 60}, "idempotencyKey": fmt.Sprintf("chaos-%d-%d", n, k)}
		}
		for ctx.Err() == nil {
			data, err := s.a.gql(ctx, `mutation($in: [SubmitJobInput!]!) { submitJobs(inputs: $in) { id } }`, map[string]any{"in": inputs})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			var v struct{ SubmitJobs []struct{ ID string } }
			_ = json.Unmarshal(data, &v)
			s.mu.Lock()
			for _, j := range v.SubmitJobs {
				s.jobs = append(s.jobs, j.ID)
			}
			s.mu.Unlock()
			break
		}
		time.Sleep(every)
	}
}

func (s *submitter) stopSubmitting() { s.mu.Lock(); s.done = true; s.mu.Unlock() }

func (s *submitter) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for _, id := range s.jobs {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
