package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// -o writes the result where asked as well as to stdout, and a bad flag
// writes no file.
func TestResultFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "result.txt")
	var stdout, stderr bytes.Buffer
	err := run([]string{"lease", "-batch", "0", "-o", file}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "-batch: 1 to") {
		t.Fatalf("run = %v, want the -batch refusal", err)
	}
	if b, err := os.ReadFile(file); err != nil || len(b) != 0 {
		t.Fatalf("result file after a refusal: %q, %v; want it empty", b, err)
	}
	err = run([]string{"lease", "-nosuchflag", "-o", filepath.Join(dir, "other.txt")}, &stdout, &stderr)
	if err == nil {
		t.Fatal("an unknown flag was accepted")
	}
	if _, err := os.Stat(filepath.Join(dir, "other.txt")); !os.IsNotExist(err) {
		t.Fatalf("a refused command line wrote its result file: %v", err)
	}
}
