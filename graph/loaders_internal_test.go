package graph

import "testing"

// Each job's share of one answer's logs: the last MiB alone or among few,
// an even share of 64 MiB among many, never under 64 KiB.
func TestLogsTailSharesABudget(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]int64{0: 1 << 20, 1: 1 << 20, 64: 1 << 20, 128: 512 << 10, 1000: 67108, 5000: 64 << 10} {
		if got := logsTail(n, logsBudget); got != want {
			t.Errorf("logsTail(%d) = %d, want %d", n, got, want)
		}
	}
	// What an answer's earlier batches spent is gone for the later ones.
	if got := logsTail(4, 1<<20); got != 256<<10 {
		t.Errorf("4 jobs with a MiB left: %d each, want 256 KiB", got)
	}
	if got := logsTail(4, 0); got != minLogsTail {
		t.Errorf("4 jobs with nothing left: %d each, want the 64 KiB floor", got)
	}
}
