package runtime

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/runmesh/runmesh/runnerapi"
)

// A job's output: conmon writes it to a file on this host, and the
// runtime sends it to the server in chunks as it grows.

// chunk is a piece of the output file: bytes [From, To) of the log are
// sequence number Seq. It is written down before it is sent, so an agent
// that dies mid-upload sends exactly the same chunk again (the server keeps
// the first of a sequence number).
type chunk struct {
	Seq  int   `json:"seq"`
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// maxRaw bounds the log bytes read for one chunk: the output in them is
// smaller (each record's time, stream and tag are dropped).
const maxRaw = runnerapi.MaxLogChunk

// sendOutput sends what the job wrote since the last chunk, and reports
// whether all of it is sent (false: try again later). Only Follow, one
// goroutine per job, touches j.log, j.pending and j.logFull.
func (j *Job) sendOutput(ctx context.Context) bool {
	r := j.r
	if j.lease.Stdio.Interactive() {
		return true // its output is written to no file, and never sent
	}
	if j.logFull {
		j.keepSmall()
		return true // nothing more of it is wanted
	}
	for ctx.Err() == nil {
		if !j.pending {
			next, ok := nextChunk(j.paths.Log, j.log)
			if !ok {
				return true
			}
			// Written down before it is sent, or not sent: an agent
			// restarted after sending must find the very same chunk.
			prev := j.log
			j.log, j.pending = next, true
			if err := j.Save(); err != nil {
				j.log, j.pending = prev, false
				r.Log.Warn("lease record", "err", err)
				return false
			}
		}
		data, err := readChunk(j.paths.Log, j.log)
		if err != nil {
			r.Log.Warn("job output", "lease_id", j.lease.LeaseID, "err", err)
			return false
		}
		err = r.Conn.UploadLog(ctx, j.lease.LeaseID, runnerapi.LogUpload{Attempt: j.lease.Attempt, Seq: j.log.Seq, Data: data})
		if refusedForGood(err) {
			// The rest stays in the file on this host only: output is
			// never worth holding back the job's result for. (An agent
			// restarted later learns this again from its next chunk.)
			r.Log.Warn("the server takes no more of this job's output: none is sent", "lease_id", j.lease.LeaseID,
				"attempt", j.lease.Attempt, "err", err)
			j.logFull, j.pending = true, false
			return true
		}
		if code(err) == runnerapi.CodeStaleAttempt {
			j.LeaseLost()
			return false
		}
		if err != nil {
			r.Log.Warn("sending output", "lease_id", j.lease.LeaseID, "err", err)
			return false // the same chunk again next time
		}
		j.pending = false
	}
	return false
}

// defaultMaxLocalOutput: see Runtime.MaxLocalOutput.
const defaultMaxLocalOutput = 256 << 20

// keepSmall empties the output file of a job whose output the server no
// longer takes, once it passes MaxLocalOutput. conmon writes it with
// O_APPEND, so its next write lands at the new end.
func (j *Job) keepSmall() {
	r := j.r
	limit := r.MaxLocalOutput
	if limit <= 0 {
		limit = defaultMaxLocalOutput
	}
	st, err := os.Stat(j.paths.Log)
	if err != nil || st.Size() <= limit {
		return
	}
	if err := os.Truncate(j.paths.Log, 0); err != nil {
		r.Log.Warn("emptying a job's output file", "lease_id", j.lease.LeaseID, "err", err)
		return
	}
	r.Log.Warn("a job's output file passed its bound on this host and was emptied", "lease_id", j.lease.LeaseID,
		"attempt", j.lease.Attempt, "bytes", st.Size())
}

// refusedForGood: an answer to a chunk that sending it again cannot change
// (past the server's bound, or malformed), unlike a stale attempt (the job
// is gone) or a failure of the server or the network.
func refusedForGood(err error) bool {
	switch code(err) {
	case runnerapi.CodeLogLimit, runnerapi.CodeBadRequest, runnerapi.CodeTooLarge:
		return true
	}
	return false
}

// code is the runner API's stable code of a refusal, or "" for any other
// error.
func code(err error) string {
	var e *runnerapi.ErrorBody
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// nextChunk finds the complete records after prev, at most maxRaw bytes.
func nextChunk(path string, prev chunk) (chunk, bool) {
	f, err := os.Open(path)
	if err != nil {
		return prev, false
	}
	defer f.Close()
	// Most ticks find nothing new: no read, no parse.
	st, err := f.Stat()
	if err != nil || st.Size() <= prev.To {
		return prev, false
	}
	buf := make([]byte, min(maxRaw, st.Size()-prev.To))
	n, err := f.ReadAt(buf, prev.To)
	if err != nil && !errors.Is(err, io.EOF) {
		return prev, false
	}
	_, used, _ := ReadOutput(buf[:n])
	if used == 0 && n == maxRaw {
		used = n // a record longer than a chunk: send it raw rather than stall
	}
	if used == 0 {
		return prev, false
	}
	return chunk{Seq: prev.Seq + 1, From: prev.To, To: prev.To + int64(used)}, true
}

func readChunk(path string, c chunk) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, c.To-c.From)
	if _, err := f.ReadAt(buf, c.From); err != nil {
		return nil, err
	}
	out, used, err := ReadOutput(buf)
	if err != nil || used != len(buf) {
		return buf, nil
	}
	return out, nil
}
