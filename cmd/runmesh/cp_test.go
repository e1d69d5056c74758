package main

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func tarOf(t *testing.T, entries ...tar.Header) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		h := h
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = "x"
			h.Size = 1
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	return &b
}

// Nothing a container sends is written outside the destination: not by
// an absolute name, a .., another top entry, nor through a link.
func TestCopyOutNeverWritesOutsideTheDestination(t *testing.T) {
	for _, c := range []struct {
		name    string
		entries []tar.Header
	}{
		{"a parent", []tar.Header{{Name: "d/../../evil", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"an absolute name", []tar.Header{{Name: "/tmp/evil", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"another top entry", []tar.Header{{Name: "other/evil", Typeflag: tar.TypeReg, Mode: 0o644}}},
		{"through its own link", []tar.Header{
			{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "d/up", Typeflag: tar.TypeSymlink, Linkname: "../.."},
			{Name: "d/up/evil", Typeflag: tar.TypeReg, Mode: 0o644},
		}},
		{"onto its own link", []tar.Header{
			{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "d/f", Typeflag: tar.TypeSymlink, Linkname: "../../evil"},
			{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			outside := t.TempDir()
			into := filepath.Join(outside, "in")
			if err := os.Mkdir(into, 0o755); err != nil {
				t.Fatal(err)
			}
			err := extract(tarOf(t, c.entries...), into, "d", "copy")
			if err == nil || !strings.Contains(err.Error(), "refused") {
				t.Fatalf("extracted (%v)", err)
			}
			for _, p := range []string{filepath.Join(outside, "evil"), "/tmp/evil", filepath.Join(into, "other")} {
				if _, err := os.Lstat(p); err == nil {
					t.Fatalf("%s was written", p)
				}
			}
		})
	}
	// A good stream: the top entry renamed, modes kept.
	into := t.TempDir()
	err := extract(tarOf(t, tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o750},
		tar.Header{Name: "d/run.sh", Typeflag: tar.TypeReg, Mode: 0o755}), into, "d", "copy")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(into, "copy", "run.sh"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("run.sh: %v %v", fi, err)
	}
	if fi, _ := os.Stat(filepath.Join(into, "copy")); fi.Mode().Perm() != 0o750 {
		t.Fatalf("the directory's mode %v", fi.Mode())
	}
}

func TestSplitRemote(t *testing.T) {
	job := "01a2495a-2564-74e3-8764-47c6c3301e07"
	if j, p, ok := splitRemote(job + ":/outputs/x"); !ok || j != job || p != "/outputs/x" {
		t.Fatal(j, p, ok)
	}
	for _, local := range []string{"a:b", "./" + job + ":x", "file.txt", "C:/x"} {
		if _, _, ok := splitRemote(local); ok {
			t.Errorf("%s read as a job's path", local)
		}
	}
}
