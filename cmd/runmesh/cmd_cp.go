package main

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/runmesh/runmesh/runnerapi"
)

func (a *app) cpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files between a running job's container and here; one side is JOB-ID:PATH",
		Long: `Copy a file or directory between a running job's container and this machine, as a tar stream
through the container engine's archive API (as podman cp does: the image needs no tar): byte for byte,
modes kept. runmesh cp JOB:/outputs/ckpt.pt . copies out, runmesh cp data.bin JOB:/scratch/ copies in. Into an
existing directory, the copy keeps its name; otherwise DST is its new name. Nothing is ever written
outside DST here: an entry that would (an absolute path, a .., a path through a symbolic link) is refused.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcJob, src, srcRemote := splitRemote(args[0])
			dstJob, dst, dstRemote := splitRemote(args[1])
			switch {
			case srcRemote == dstRemote:
				return errors.New("one side of cp is JOB-ID:PATH, the other a path here")
			case srcRemote:
				return a.copyOut(cmd.Context(), srcJob, src, dst)
			default:
				return a.copyIn(cmd.Context(), src, dstJob, dst)
			}
		},
	}
}

// splitRemote reads JOB:PATH (a job's id is a UUID: a path here with a
// colon in it is not taken for one).
func splitRemote(arg string) (job, p string, remote bool) {
	j, rest, ok := strings.Cut(arg, ":")
	if !ok || len(j) != 36 || strings.Count(j, "-") != 4 {
		return "", arg, false
	}
	return j, rest, true
}

// execIn runs cmd in the job's container with in as its stdin, its stdout
// to out; a non-zero status is an error with what it wrote to stderr.
func (a *app) copySession(ctx context.Context, job string, cmd []string, in io.Reader, out io.Writer) error {
	end, err := a.relay(ctx, job, runnerapi.SessionRequest{Kind: runnerapi.SessionCopy, Command: cmd},
		streams{in: in, out: out, err: io.Discard})
	if err != nil {
		return err
	}
	switch {
	case end.Code == runnerapi.EndFailed:
		return fmt.Errorf("cp: %s", end.Reason)
	case end.Code != runnerapi.EndExited:
		return fmt.Errorf("the session ended: %s", sessionSentence(end))
	case end.Exit != nil && *end.Exit != 0:
		return fmt.Errorf("cp: exit status %d", *end.Exit)
	}
	return nil
}

// copyOut copies src in the container to dst here.
func (a *app) copyOut(ctx context.Context, job, src, dst string) error {
	if src == "" {
		return errors.New("cp: JOB:PATH needs a path")
	}
	src = path.Clean(src)
	base := path.Base(src)
	// Into an existing directory the copy keeps its name; else dst names it.
	name := filepath.Base(dst)
	into := filepath.Dir(dst)
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		name, into = base, dst
	}
	if fi, err := os.Stat(into); err != nil || !fi.IsDir() {
		return fmt.Errorf("cp: %s is not a directory here", into)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := extract(pr, into, base, name)
		pr.CloseWithError(err)
		done <- err
	}()
	err := a.copySession(ctx, job, []string{runnerapi.CopyOut, src}, nil, pw)
	pw.CloseWithError(err)
	if xerr := <-done; err == nil && xerr != nil {
		err = xerr
	}
	return err
}

// copyIn copies src here to dst in the container.
func (a *app) copyIn(ctx context.Context, src, job, dst string) error {
	if dst == "" {
		return errors.New("cp: JOB:PATH needs a path")
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return fmt.Errorf("cp: %w", err)
	}
	dst = path.Clean(dst)
	if fi.Mode()&fs.ModeSymlink == 0 && !fi.Mode().IsRegular() && !fi.IsDir() {
		return fmt.Errorf("cp: %s is neither a file, a directory nor a link", src)
	}
	// The agent puts it into dst when dst is a directory there, else
	// names it dst.
	name := filepath.Base(src)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(archive(pw, src, name)) }()
	err = a.copySession(ctx, job, []string{runnerapi.CopyIn, dst, name}, pr, io.Discard)
	pr.CloseWithError(io.ErrClosedPipe)
	return err
}

// archive writes src (a file, a link or a directory tree) as a tar stream
// whose top entry is named name.
func archive(w io.Writer, src, name string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = path.Join(name, filepath.ToSlash(rel))
		if fi.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname, h.Uid, h.Gid = "", "", 0, 0
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// extract writes the tar stream's entries under into, the top entry base
// renamed name. It refuses any entry that would land outside into: an
// absolute name, a .., or a path through a symbolic link (one of the
// archive's, or one already there).
func extract(r io.Reader, into, base, name string) error {
	tr := tar.NewReader(r)
	root, err := filepath.Abs(into)
	if err != nil {
		return err
	}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("cp: reading the container's tar stream: %w", err)
		}
		rel := path.Clean(strings.TrimSuffix(h.Name, "/"))
		if path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") || (rel != base && !strings.HasPrefix(rel, base+"/")) {
			return fmt.Errorf("cp: refused an entry outside the copy: %q", h.Name)
		}
		rel = name + strings.TrimPrefix(rel, base)
		target := filepath.Join(root, filepath.FromSlash(rel))
		if err := noLinkBetween(root, filepath.Dir(target)); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return err
			}
			if err := os.Chmod(target, mode); err != nil {
				return err
			}
		case tar.TypeReg:
			if fi, err := os.Lstat(target); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				return fmt.Errorf("cp: refused to write through the symbolic link %s", target)
			}
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := os.Chmod(target, mode); err != nil {
				return err
			}
		case tar.TypeSymlink:
			// Kept as a link, never followed: later entries through it
			// are refused above.
			if err := os.Symlink(h.Linkname, target); err != nil {
				return err
			}
		default:
			// Devices, FIFOs and hard links are not copied.
		}
	}
}

// noLinkBetween refuses a directory under root reached through a symbolic
// link.
func noLinkBetween(root, dir string) error {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("cp: refused a path outside %s", root)
	}
	p := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if part == "." || part == "" {
			continue
		}
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // made by the copy's own directory entries, in order
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("cp: refused to write through the symbolic link %s", p)
		}
	}
	return nil
}
