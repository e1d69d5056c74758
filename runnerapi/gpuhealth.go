package runnerapi

import (
	"fmt"
	"time"
)

// GPUFault is the evidence that took a GPU out of service: a critical XID
// or an uncorrectable ECC error, as NVML reported it. The agent reports it
// with the GPU; the server keeps it, and the GPU stays out of placement,
// across agent restarts, until an administrator clears it.
type GPUFault struct {
	UUID string `json:"uuid"`
	// XID is the critical XID NVML raised; 0 when an uncorrectable ECC
	// error was the evidence.
	XID int `json:"xid,omitempty"`
	// The GPU's volatile ECC error counts (since the driver loaded) when
	// the fault was seen.
	ECCUncorrected uint64    `json:"ecc_uncorrected"`
	ECCCorrected   uint64    `json:"ecc_corrected"`
	ObservedAt     time.Time `json:"observed_at"`
	// RecordedAt is when the server first stored the fault (set by the
	// server; the agent leaves it empty).
	RecordedAt *time.Time `json:"recorded_at,omitempty"`
}

// Evidence says what was seen, in a line: "XID 79 at 2026-12-02T10:00:00Z
// (ECC: 0 uncorrected, 2 corrected)".
func (f GPUFault) Evidence() string {
	what := "uncorrectable (double-bit) ECC error"
	if f.XID != 0 {
		what = fmt.Sprintf("XID %d", f.XID)
	}
	return fmt.Sprintf("%s at %s (ECC: %d uncorrected, %d corrected)", what, f.ObservedAt.UTC().Format(time.RFC3339),
		f.ECCUncorrected, f.ECCCorrected)
}

// maxXID is beyond any XID NVIDIA documents.
const maxXID = 1 << 20

// checkFault refuses evidence no agent could have seen: a fault of another
// GPU, an impossible XID, or no time.
func checkFault(i int, g GPU) error {
	f := g.Fault
	switch {
	case f == nil:
		return nil
	case g.Healthy:
		return fmt.Errorf("gpus[%d].fault: a healthy GPU has no fault", i)
	case f.UUID != g.UUID:
		return fmt.Errorf("gpus[%d].fault.uuid: %q is not the GPU's", i, f.UUID)
	case f.XID < 0 || f.XID > maxXID:
		return fmt.Errorf("gpus[%d].fault.xid: %d is impossible", i, f.XID)
	case f.ObservedAt.IsZero() || f.ObservedAt.Year() > 9999:
		return fmt.Errorf("gpus[%d].fault.observed_at: missing or impossible", i)
	case f.RecordedAt != nil:
		return fmt.Errorf("gpus[%d].fault.recorded_at: the server's to set", i)
	}
	return nil
}

// Faulted are the UUIDs of faults, for lookups.
func Faulted(faults []GPUFault) map[string]GPUFault {
	out := make(map[string]GPUFault, len(faults))
	for _, f := range faults {
		out[f.UUID] = f
	}
	return out
}
