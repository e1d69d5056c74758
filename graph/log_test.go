package graph_test

import (
	"log/slog"
	"testing"
)

type slogLogger = slog.Logger

// newTestLogger sends log lines to t.Log, so they show with a failure.
func newTestLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
