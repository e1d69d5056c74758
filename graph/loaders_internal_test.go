package graph

import "testing"

// Each job's share of one answer's logs: the last MiB alone or among few,
// an even share of 64 MiB among many, never under 64 KiB.
func TestLogsTailSharesABudget(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]int64{0: 1 << 20, 1: 1 << 20, 64: 1 << 20, 128: 512 << 10, 1000: 67108, 5000: 64 << 10} {
		if got := logsTail(n); got != want {
			t.Errorf("logsTail(%d) = %d, want %d", n, got, want)
		}
	}
}
