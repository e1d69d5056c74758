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

// CPU and allocations per job are the rounds' own over their jobs,
// averaged: cores over jobs a second.
func TestPerJob(t *testing.T) {
	t.Parallel()
	rs := []round{
		{rate: 10000, cpu: cores{self: 0.5, postgres: 1.5, allocs: allocRate{objects: 600000, bytes: 1.2e8}}},
		{rate: 20000, cpu: cores{self: 0.6, postgres: 1.8, allocs: allocRate{objects: 1400000, bytes: 2.8e8}}},
	}
	if got, want := cpuPerJob(rs, false), "40.0 µs"; got != want { // (50 + 30) / 2
		t.Errorf("cpuPerJob(self) = %s, want %s", got, want)
	}
	if got, want := cpuPerJob(rs, true), "120.0 µs"; got != want { // (150 + 90) / 2
		t.Errorf("cpuPerJob(postgres) = %s, want %s", got, want)
	}
	if got, want := allocsPerJob(rs), "65 objects, 13.0 KB"; got != want { // (60 + 70) / 2, (12 + 14) / 2
		t.Errorf("allocsPerJob = %s, want %s", got, want)
	}
}
