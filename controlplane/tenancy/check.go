package tenancy

import (
	"regexp"
	"time"

	"github.com/runmesh/runmesh/controlplane/record"
	"github.com/runmesh/runmesh/runnerapi"
)

// The rules of what tenancy keeps, checked before anything is written; the
// schema's CHECK constraints say the same of what they can.

var handle = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// checkHandle: organisations and pools are named by handles, fit for a
// command line and a URL.
func checkHandle(field, v string) error {
	if !handle.MatchString(v) {
		return record.Invalidf("%s: 1 to 63 lower-case letters, digits and dashes, not starting with a dash", field)
	}
	return nil
}

// Bounds of the pool settings.
const (
	MinLeaseSeconds, MaxLeaseSeconds           = 5, 3600
	MinQueueTimeoutHours, MaxQueueTimeoutHours = 1, 8760
)

func checkPoolSettings(leaseSeconds, queueTimeoutHours *int) error {
	if v := leaseSeconds; v != nil && (*v < MinLeaseSeconds || *v > MaxLeaseSeconds) {
		return record.Invalidf("leaseSeconds: between %d and %d", MinLeaseSeconds, MaxLeaseSeconds)
	}
	if v := queueTimeoutHours; v != nil && (*v < MinQueueTimeoutHours || *v > MaxQueueTimeoutHours) {
		return record.Invalidf("queueTimeoutHours: between %d and %d", MinQueueTimeoutHours, MaxQueueTimeoutHours)
	}
	return nil
}

func checkNewPool(p record.NewPool) error {
	if err := checkHandle("name", p.Name); err != nil {
		return err
	}
	if err := checkPoolImages(p.Images); err != nil {
		return err
	}
	return checkPoolSettings(p.LeaseSeconds, p.QueueTimeoutHours)
}

func (c PoolChange) check() error {
	if c.Name != nil {
		if err := checkHandle("name", *c.Name); err != nil {
			return err
		}
	}
	if err := checkPoolImages(c.Images); err != nil {
		return err
	}
	return checkPoolSettings(c.LeaseSeconds.value, c.QueueTimeoutHours.value)
}

// checkPoolImages: each a reference a job could name, optionally pinned by
// a sha256 digest, none twice, at most runnerapi.MaxPoolImages.
func checkPoolImages(images []string) error {
	if len(images) > runnerapi.MaxPoolImages {
		return record.Invalidf("images: at most %d", runnerapi.MaxPoolImages)
	}
	seen := map[string]bool{}
	for i, img := range images {
		ref, _, err := runnerapi.ParsePoolImage(img)
		if err != nil {
			return record.Invalidf("images[%d]: %v", i, err)
		}
		if seen[ref] {
			return record.Invalidf("images[%d]: %s is listed twice", i, ref)
		}
		seen[ref] = true
	}
	return nil
}

// Bounds of an admin's name and token lifetime.
const (
	MaxAdminName             = 200
	MinAdminTTL, MaxAdminTTL = time.Minute, 10 * 365 * 24 * time.Hour
)

// check: a known role, a name, a lifetime in bounds, and an organisation
// exactly when the role belongs to one.
func (a NewAdmin) check() error {
	switch {
	case a.Name == "" || len(a.Name) > MaxAdminName:
		return record.Invalidf("name: 1 to %d characters", MaxAdminName)
	case a.Role.Rank() == 0:
		return record.Invalidf("role: unknown")
	case a.TTL != nil && (*a.TTL < MinAdminTTL || *a.TTL > MaxAdminTTL):
		return record.Invalidf("ttlSeconds: between %d and %d", int(MinAdminTTL.Seconds()), int(MaxAdminTTL.Seconds()))
	case a.Role == record.RolePlatformAdmin && a.OrganisationID != nil:
		return record.Invalidf("organisationId: platform admins belong to no organisation")
	case a.Role != record.RolePlatformAdmin && a.OrganisationID == nil:
		return record.Invalidf("organisationId: required for role %s", a.Role)
	}
	return nil
}
