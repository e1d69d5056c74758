package queue_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/runmesh/runmesh/controlplane/queue"
	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// Submissions are checked in the queue, before anything reaches the store
// (here there is none): a refused job is named by its place in the batch,
// a refused batch by -1.
func TestTheQueueChecksSubmissionsBeforeTheStore(t *testing.T) {
	t.Parallel()
	q := queue.NewService(nil, nil)
	pool := uuid.New()
	ok := queue.Submission{PoolID: pool, Image: "busybox", Claim: record.Claim{Cores: 1, WallClockSeconds: 60}, MaxAttempts: 1, Kind: "default"}
	with := func(f func(*queue.Submission)) queue.Submission {
		s := ok
		f(&s)
		return s
	}
	for name, c := range map[string]struct {
		batch []queue.Submission
		job   int
		msg   string
	}{
		"empty":     {nil, -1, "1 to 1000 jobs a batch"},
		"too many":  {make([]queue.Submission, queue.MaxBatch+1), -1, "1 to 1000 jobs a batch"},
		"two pools": {[]queue.Submission{ok, with(func(s *queue.Submission) { s.PoolID = uuid.New() })}, -1, "every job of a batch goes to the same pool"},
		"no cores":  {[]queue.Submission{ok, with(func(s *queue.Submission) { s.Claim.Cores = 0 })}, 1, "claim.cores: more than 0, at most 4096"},
		"bad kind":  {[]queue.Submission{with(func(s *queue.Submission) { s.Kind = "Batch" })}, 0, "kind: lower-case letters, digits, dots, dashes and underscores"},
		"env name":  {[]queue.Submission{with(func(s *queue.Submission) { s.Env = []queue.EnvVar{{Name: "A=B"}} })}, 0, `env: "A=B" is not a variable name`},
		"env twice": {[]queue.Submission{ok, ok, with(func(s *queue.Submission) { s.Env = []queue.EnvVar{{Name: "A"}, {Name: "A"}} })}, 2, "env: A given twice"},
		"empty key": {[]queue.Submission{with(func(s *queue.Submission) { s.IdempotencyKey = new(string) })}, 0, "idempotencyKey: 1 to 200 characters"},
		"big spec": {[]queue.Submission{with(func(s *queue.Submission) {
			s.Env = []queue.EnvVar{{Name: "BIG", Value: strings.Repeat("x", runnerapi.MaxJobSpecBytes)}}
		})}, 0, "image, command, env, inputs and outputs: at most 64 KiB together (a presigned URL counts 1024 bytes and its key four times)"},
	} {
		_, _, err := q.SubmitAll(context.Background(), record.AllOrganisations(), c.batch)
		var ie *record.InputError
		require.ErrorAs(t, err, &ie, name)
		if c.job < 0 {
			require.Nil(t, ie.Item, name+": the batch as a whole")
		} else {
			require.NotNil(t, ie.Item, name)
			require.Equal(t, c.job, *ie.Item, name)
		}
		require.Equal(t, c.msg, ie.Msg, name)
	}
}
