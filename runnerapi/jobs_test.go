package runnerapi

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
)

// worst is a string of n bytes that JSON escapes to six bytes each (Go's
// encoder writes '<' as \u003c).
func worst(n int) string { return strings.Repeat("<", n) }

// Any MaxResultsPerRequest results within the bounds the server checks
// (return reason 512 bytes, digest and version 256) fit
// MaxResultsBodyBytes, however escaped.
func TestAnyValidResultsFitTheirBound(t *testing.T) {
	reason, digest, version := worst(512), worst(256), worst(256)
	code, peak := math.MinInt32, int64(math.MaxInt64)
	one := LeaseResult{
		LeaseID: strings.Repeat("f", 36),
		ResultRequest: ResultRequest{
			Attempt: math.MaxInt32, ExitCode: &code, ReturnReason: &reason, HostFault: true, OOM: true,
			PeakMemoryMiB: &peak, ImageDigest: &digest, RunnerVersion: &version,
		},
	}
	results := make([]LeaseResult, MaxResultsPerRequest)
	for i := range results {
		results[i] = one
	}
	body, err := json.Marshal(ResultsRequest{Results: results})
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > MaxResultsBodyBytes {
		t.Fatalf("%d worst-case results take %d bytes, over MaxResultsBodyBytes (%d)", len(results), len(body), MaxResultsBodyBytes)
	}
}

// An answer the claim may give (at most max leases, their specs together
// within MaxAnswerSpecBytes, each within MaxJobSpecBytes and 256 command
// and env entries) fits LeaseAnswerBytes(max), however escaped.
func TestLeaseAnswersFitWhatRunnersRead(t *testing.T) {
	// lease is a lease whose spec takes size bytes (as submission counts
	// them: image, command entries, env names and values), escaping all it
	// can, with 256 command and env entries and every other field at its
	// longest.
	lease := func(size int) Lease {
		l := Lease{
			LeaseID: strings.Repeat("f", 36), Attempt: math.MaxInt32, Env: map[string]string{},
			Claim:            Resources{Cores: -math.MaxFloat64, MemoryMiB: math.MinInt64, GPUs: math.MinInt},
			WallClockSeconds: math.MinInt, Kind: strings.Repeat("k", 64), LeaseSeconds: math.MinInt,
			Stdio: StdioPipe, IdleTimeoutSeconds: math.MinInt,
		}
		for i := 0; i < 256; i++ {
			l.Command = append(l.Command, worst(1))
			name := fmt.Sprintf("E%d", i)
			l.Env[name] = ""
			size -= 1 + len(name)
		}
		l.Image = worst(size)
		return l
	}
	small := 0 // the smallest spec with every entry: no image
	for i := 0; i < 256; i++ {
		small += 1 + len(fmt.Sprintf("E%d", i)) // a command entry, an env name
	}
	for _, max := range []int{1, 4, 128, 129, MaxLeasesPerRequest} {
		// As many full specs as the answer's bound leaves room for,
		// beside the smallest ones for the rest.
		var leases []Lease
		spec := 0
		for i := 0; i < max; i++ {
			if rest := max - i - 1; spec+MaxJobSpecBytes+rest*small <= MaxAnswerSpecBytes {
				leases, spec = append(leases, lease(MaxJobSpecBytes)), spec+MaxJobSpecBytes
			} else {
				leases, spec = append(leases, lease(small)), spec+small
			}
		}
		body, err := json.Marshal(LeaseResponse{Leases: leases})
		if err != nil {
			t.Fatal(err)
		}
		if len(body) > LeaseAnswerBytes(max) {
			t.Fatalf("max %d: the answer takes %d bytes, over LeaseAnswerBytes (%d)", max, len(body), LeaseAnswerBytes(max))
		}
		t.Logf("max %d: %d full specs, %d bytes of %d", max, spec/MaxJobSpecBytes, len(body), LeaseAnswerBytes(max))
	}
}

// A result with the most data records, each at its bounds and escaped at
// worst, fits MaxResultBodyBytes; CheckRecords refuses records that could
// not be true.
func TestAResultWithDataFitsItsBound(t *testing.T) {
	reason, digest := worst(512), worst(256)
	r := ResultRequest{Attempt: 1, ReturnReason: &reason, ImageDigest: &digest, RunnerVersion: &digest}
	for range MaxInputs {
		r.Inputs = append(r.Inputs, InputRecord{Name: strings.Repeat("n", 128), Key: worst(MaxKeyBytes), SHA256: strings.Repeat("a", 64), Size: math.MaxInt64, ETag: worst(80)})
	}
	for range MaxOutputs {
		r.Outputs = append(r.Outputs, OutputRecord{Key: worst(MaxKeyBytes), SHA256: strings.Repeat("a", 64), Size: math.MaxInt64, MD5: strings.Repeat("b", 32)})
	}
	body, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > MaxResultBodyBytes {
		t.Fatalf("a worst-case result takes %d bytes, over MaxResultBodyBytes (%d)", len(body), MaxResultBodyBytes)
	}
	good := OutputRecord{Key: "k", SHA256: strings.Repeat("a", 64), MD5: strings.Repeat("b", 32)}
	if err := CheckRecords(nil, []OutputRecord{good}); err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]OutputRecord{
		"short sha": {Key: "k", SHA256: "abc", MD5: good.MD5}, "upper md5": {Key: "k", SHA256: good.SHA256, MD5: strings.Repeat("B", 32)},
		"no key": {SHA256: good.SHA256, MD5: good.MD5}, "negative": {Key: "k", SHA256: good.SHA256, MD5: good.MD5, Size: -1},
	} {
		if CheckRecords(nil, []OutputRecord{o}) == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if CheckRecords([]InputRecord{{Name: "../x", SHA256: good.SHA256}}, nil) == nil {
		t.Error("an input named ../x: accepted")
	}
}
