package enrolment

import (
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/runmesh/runmesh/controlplane/internal/store"
	"github.com/runmesh/runmesh/controlplane/record"
)

// A notification drops what it names and nothing else: a runner's
// entries (read with the runner, or at the handshake without it), a pool's
// runners' entries, a revoked serial's. What names nothing readable
// empties the cache, as does a slow subscriber's "".
func TestANotificationDropsWhatItNames(t *testing.T) {
	a, b, poolA, poolB := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	fill := func() *identities {
		c := newIdentities(nil)
		now := time.Now()
		c.entries = map[string]identity{
			// a's certificate, read with the runner; an older one of a's,
			// seen at a handshake only.
			"a1": {standing: store.CertificateStanding{Known: true, RunnerID: &a}, runner: record.Runner{ID: a, PoolID: poolA}, at: now},
			"a0": {standing: store.CertificateStanding{Known: true, RunnerID: &a}, at: now},
			"b1": {standing: store.CertificateStanding{Known: true, RunnerID: &b}, runner: record.Runner{ID: b, PoolID: poolB}, at: now},
			// The server's own listener certificate: no runner.
			"srv": {standing: store.CertificateStanding{Known: true}, at: now},
		}
		return c
	}
	left := func(c *identities) []string {
		var out []string
		for s := range c.entries {
			out = append(out, s)
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		channel, payload string
		left             []string
	}{
		{store.ChannelRunnerStatus, a.String(), []string{"b1", "srv"}},
		{store.ChannelRunnerStatus, store.PoolChanged + poolB.String(), []string{"a0", "a1", "srv"}},
		{store.ChannelRunnerStatus, uuid.NewString(), []string{"a0", "a1", "b1", "srv"}},
		{store.ChannelRevocations, "a0", []string{"a1", "b1", "srv"}},
		{store.ChannelRunnerStatus, "", nil},
		{store.ChannelRunnerStatus, "not an id", nil},
		{store.ChannelRunnerStatus, store.PoolChanged + "not an id", nil},
		{store.ChannelRevocations, "", nil},
	} {
		c := fill()
		gen := c.gen
		c.heard(tc.channel, tc.payload)
		if got := left(c); !slices.Equal(got, tc.left) {
			t.Errorf("%s %q: left %v, want %v", tc.channel, tc.payload, got, tc.left)
		}
		if c.gen == gen {
			t.Errorf("%s %q: a lookup racing it could cache what it dropped", tc.channel, tc.payload)
		}
	}
}
