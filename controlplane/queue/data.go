package queue

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/runmesh/runmesh/controlplane/objects"
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
func (l *Leases) presign(ctx context.Context, j record.Job, leaseSeconds int) ([]runnerapi.LeaseInput, []runnerapi.LeaseOutput) {
	if len(j.Options.Inputs) == 0 && len(j.Options.Outputs) == 0 {
		return nil, nil
	}
	valid := time.Duration(j.Claim.WallClockSeconds+leaseSeconds)*time.Second + presignSlack
	sign := func(put bool, key string) string {
		if l.bucket == nil {
			l.log.Error("a job names an object key, and this server has no storage", "job_id", j.ID, "key", key)
			return ""
		}
		var u string
		var err error
		if put {
			u, err = l.bucket.PresignPut(ctx, key, valid)
		} else {
			u, err = l.bucket.PresignGet(ctx, key, valid)
		}
		if err != nil {
			l.log.Error("presign", "job_id", j.ID, "key", key, "err", err)
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

// checkOutputs checks, before the result of an attempt that exited 0 is
// accepted, that the storage has every output the job names as the runner
// attested it: the object there (a HEAD), its size the one uploaded, and
// its ETag the upload's MD5 where the storage gives one in that form. An
// attempt that fails this is not a success: it ends given back, the host's
// fault (the job does not run elsewhere for a missing object otherwise). A
// storage that does not answer is an error: the runner sends the result
// again later.
func (l *Leases) checkOutputs(ctx context.Context, o *record.Outcome) error {
	if l.bucket == nil || o.ExitCode == nil || *o.ExitCode != 0 {
		return nil
	}
	opts, err := l.st.JobOptionsOf(ctx, o.JobID)
	if errors.Is(err, record.ErrNotFound) || err == nil && len(opts.Outputs) == 0 {
		return nil // the finish answers for a job that is not there
	}
	if err != nil {
		return err
	}
	var got []runnerapi.OutputRecord
	if o.Data != nil {
		got = o.Data.Outputs
	}
	reason, err := l.verifyOutputs(ctx, opts.Outputs, got)
	if err != nil || reason == "" {
		return err
	}
	o.ExitCode, o.ReturnReason, o.HostFault = nil, &reason, true
	return nil
}

var md5ETag = regexp.MustCompile(`^[0-9a-f]{32}$`)

func (l *Leases) verifyOutputs(ctx context.Context, want []runnerapi.JobOutput, got []runnerapi.OutputRecord) (string, error) {
	for i, w := range want {
		if i >= len(got) || got[i].Key != w.Key {
			return fmt.Sprintf("output %s: the runner did not attest its upload", w.Key), nil
		}
		obj, err := l.bucket.Stat(ctx, w.Key)
		switch {
		case errors.Is(err, objects.ErrNoObject):
			return fmt.Sprintf("output %s: not in the storage", w.Key), nil
		case err != nil:
			return "", err
		case obj.Size != got[i].Size:
			return fmt.Sprintf("output %s: the storage has %d bytes, the runner uploaded %d", w.Key, obj.Size, got[i].Size), nil
		case md5ETag.MatchString(obj.ETag) && obj.ETag != got[i].MD5:
			return fmt.Sprintf("output %s: the storage's ETag %s is not the upload's MD5 %s", w.Key, obj.ETag, got[i].MD5), nil
		}
	}
	return "", nil
}
