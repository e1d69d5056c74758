package main

import "testing"

// A ratio under 1 never reads as 1.00 beside its verdict of NOT met.
func TestRatioTextNeverRoundsUpToOne(t *testing.T) {
	t.Parallel()
	for r, want := range map[float64]string{
		0.9949: "0.99", 0.995: "0.995", 0.9996: "0.999", 1: "1.00", 1.004: "1.00", 1.0961: "1.10",
	} {
		if got := ratioText(r); got != want {
			t.Errorf("ratioText(%v) = %q, want %q", r, got, want)
		}
	}
}
