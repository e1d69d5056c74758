package graph_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/runmesh/runmesh/graph"
)

type slogLogger = slog.Logger

// newTestLogger sends log lines to t.Log, so they show with a failure. A
// mutation that succeeded without its audit entry in its own transaction
// fails the test: every domain change goes through audit.Change.
func newTestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	if strings.Contains(string(p), graph.UnauditedMutation) {
		w.t.Errorf("a mutation was audited apart from its change: %s", p)
	}
	return len(p), nil
}
