package runnerhttp

import (
	"context"
	"time"

	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// presignSlack is what a presigned URL lasts beyond the job's wall clock
// and its lease: the image's pull and the inputs' fetch come before the
// wall clock starts, the outputs' upload after it ends.
const presignSlack = time.Hour

// presign gives a lease its data's URLs: a GET for each input named by key
// and a PUT for each output, each valid for the job's wall clock plus its
// lease and presignSlack; a submitter's URL goes as given. Presigning is
// local (no request to the storage). A key the server cannot presign (its
// storage removed from the config since the job was submitted) goes with
// no URL, which the agent reports as the host's failure.
func (s *Server) presign(ctx context.Context, j record.Job, leaseSeconds int) ([]runnerapi.LeaseInput, []runnerapi.LeaseOutput) {
	if len(j.Options.Inputs) == 0 && len(j.Options.Outputs) == 0 {
		return nil, nil
	}
	valid := time.Duration(j.Claim.WallClockSeconds+leaseSeconds)*time.Second + presignSlack
	sign := func(put bool, key string) string {
		if s.o.Storage == nil {
			s.o.Log.Error("a job names an object key, and this server has no storage", "job_id", j.ID, "key", key)
			return ""
		}
		var u string
		var err error
		if put {
			u, err = s.o.Storage.PresignPut(ctx, key, valid)
		} else {
			u, err = s.o.Storage.PresignGet(ctx, key, valid)
		}
		if err != nil {
			s.o.Log.Error("presign", "job_id", j.ID, "key", key, "err", err)
		}
		return u
	}
	var ins []runnerapi.LeaseInput
	for _, in := range j.Options.Inputs {
		li := runnerapi.LeaseInput{Name: in.Name, URL: in.URL, Key: in.Key}
		if in.Key != "" {
			li.URL = sign(false, in.Key)
		}
		ins = append(ins, li)
	}
	var outs []runnerapi.LeaseOutput
	for _, o := range j.Options.Outputs {
		outs = append(outs, runnerapi.LeaseOutput{Path: o.Path, Key: o.Key, URL: sign(true, o.Key)})
	}
	return ins, outs
}
