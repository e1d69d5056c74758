package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// appendTo adds s to the file at path, as a job's output grows.
func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func criLine(stream, tag, text string) string {
	return "2026-11-30T12:00:00.000000000+00:00 " + stream + " " + tag + " " + text + "\n"
}

// Chunks cover whole records, continue where the last ended, and reading
// a chunk again gives the same bytes: what an agent restarted mid-upload
// sends under the same sequence number.
func TestChunksAreWholeRecordsAndRepeatable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "job.log")
	write := func(s string) { appendTo(t, path, s) }
	if _, ok := nextChunk(path, chunk{Seq: -1}); ok {
		t.Fatal("a chunk from a file that is not there")
	}
	write(criLine("stdout", "F", "one") + criLine("stderr", "P", "tw"))
	// A record still being written is left for later.
	write("2026-11-30T12:00:00.000000000+00:00 stdout F o")
	c, ok := nextChunk(path, chunk{Seq: -1})
	if !ok || c.Seq != 0 || c.From != 0 {
		t.Fatalf("first chunk %+v %v", c, ok)
	}
	data, err := readChunk(path, c)
	if err != nil || string(data) != "one\ntw" {
		t.Fatalf("first chunk %q %v", data, err)
	}
	write("\n")
	next, ok := nextChunk(path, c)
	if !ok || next.Seq != 1 || next.From != c.To {
		t.Fatalf("second chunk %+v", next)
	}
	data, _ = readChunk(path, next)
	if string(data) != "o\n" {
		t.Fatalf("second chunk %q", data)
	}
	if again, _ := readChunk(path, c); string(again) != "one\ntw" {
		t.Fatalf("the first chunk read again: %q", again)
	}
	if _, ok := nextChunk(path, next); ok {
		t.Fatal("a chunk with nothing new")
	}
	// A large output is cut into chunks no bigger than an upload.
	write(strings.Repeat(criLine("stdout", "F", strings.Repeat("x", 1000)), 100))
	sum := 0
	for c := next; ; {
		n, ok := nextChunk(path, c)
		if !ok {
			break
		}
		d, _ := readChunk(path, n)
		if n.To-n.From > maxRaw || len(d) > maxRaw {
			t.Fatalf("chunk of %d bytes (%d raw)", len(d), n.To-n.From)
		}
		sum += len(d)
		c = n
	}
	if sum != 100*1001 {
		t.Fatalf("%d bytes of output, want %d", sum, 100*1001)
	}
}
