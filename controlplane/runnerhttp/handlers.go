package runnerhttp

import (
	"errors"
	"net/http"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/enrolment"
	"github.com/runmesh/runmesh/runnerapi"
)

// Each handler below decodes, calls one domain method and encodes. What
// each method decides is said where it is written.

func (s *Server) enrol(w http.ResponseWriter, r *http.Request) {
	var req runnerapi.EnrolRequest
	if !decode(w, r, &req) {
		return
	}
	resp, err := s.o.Enrolment.Enrol(r.Context(), req, r.RemoteAddr)
	if err != nil {
		s.fail(w, r, "enrol", err)
		return
	}
	writeJSON(w, http.StatusCreated, resp)
}

func (s *Server) wait(w http.ResponseWriter, r *http.Request) {
	var req runnerapi.WaitRequest
	if !decode(w, r, &req) {
		return
	}
	resp, err := s.o.Enrolment.Wait(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.fail(w, r, "wait for a decision", err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) whoami(w http.ResponseWriter, _ *http.Request, c enrolment.Caller) {
	resp := runnerapi.WhoAmIResponse{
		RunnerID: c.Runner.ID.String(), Name: c.Runner.Name, PoolID: c.Runner.PoolID.String(),
		CertificateSerial: c.Serial, CertificateNotAfter: c.NotAfter.UTC(),
	}
	if c.Runner.OrganisationID != nil {
		resp.OrganisationID = c.Runner.OrganisationID.String()
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, c enrolment.Caller) {
	var req runnerapi.HeartbeatRequest
	if !decodeWithin(w, r, &req, runnerapi.MaxHeartbeatBodyBytes) {
		return
	}
	resp, err := s.o.Heartbeats.Beat(r.Context(), c.Runner, req)
	if err != nil {
		s.fail(w, r, "heartbeat", err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) leases(w http.ResponseWriter, r *http.Request, c enrolment.Caller) {
	var req runnerapi.LeaseRequest
	if !decode(w, r, &req) {
		return
	}
	leases, err := s.o.Leases.AskForWork(r.Context(), c.Runner, req)
	if err != nil {
		s.fail(w, r, "leases", err)
		return
	}
	writeJSON(w, http.StatusOK, runnerapi.LeaseResponse{Leases: leases})
	// An answer that could not be flushed never reached the runner: what
	// it granted goes back to the queue. (A writer that cannot flush
	// leaves the answer to the server's own flush at the end: it counts
	// as delivered.)
	if err := http.NewResponseController(w).Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) && len(leases) > 0 {
		s.o.Leases.GiveBack(r.Context(), c.Runner, leases)
	}
}

// leaseID is the lease the path names; one that is no lease id is
// answered not_found.
func leaseID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusNotFound, runnerapi.CodeNotFound, "no such lease")
		return uuid.Nil, false
	}
	return id, true
}

func (s *Server) logs(w http.ResponseWriter, r *http.Request, c enrolment.Caller) {
	id, ok := leaseID(w, r)
	if !ok {
		return
	}
	var req runnerapi.LogUpload
	if !decode(w, r, &req) {
		return
	}
	if err := s.o.Leases.AppendOutput(r.Context(), c.Runner, id, req); err != nil {
		s.fail(w, r, "logs", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) result(w http.ResponseWriter, r *http.Request, c enrolment.Caller) {
	id, ok := leaseID(w, r)
	if !ok {
		return
	}
	var req runnerapi.ResultRequest
	if !decodeWithin(w, r, &req, runnerapi.MaxResultBodyBytes) {
		return
	}
	resp, err := s.o.Leases.Result(r.Context(), c.Runner, id, req)
	if err != nil {
		s.fail(w, r, "result", err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) results(w http.ResponseWriter, r *http.Request, c enrolment.Caller) {
	var req runnerapi.ResultsRequest
	if !decodeWithin(w, r, &req, runnerapi.MaxResultsBodyBytes) {
		return
	}
	resp, err := s.o.Leases.Results(r.Context(), c.Runner, req)
	if err != nil {
		s.fail(w, r, "results", err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}
