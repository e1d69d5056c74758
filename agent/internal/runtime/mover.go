package runtime

import (
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/runmesh/runmesh/runnerapi"
)

// Mover moves a job's files: it fetches each input through its URL exactly
// as given (a presigned URL normalised is a URL whose signature no longer
// matches) into the job's inputs directory, and uploads each output by PUT
// after the job exited, hashing every byte as it goes. Whose fault a
// failure is: storage that cannot be reached, a 5xx that outlasts the
// retries, or a full disk is the host's (the job may run elsewhere); a 403
// or 404, an input larger than the job claimed, or an output the job did
// not write is the job's. Its zero value has the defaults.
type Mover struct {
	Client *http.Client
	// FileTimeout bounds one file's transfer, each try (default 30 min).
	FileTimeout time.Duration
	// Tries is how often a transfer is tried when the storage answers 5xx
	// or cannot be reached (default 4), with Backoff doubling between
	// tries (default 1 s).
	Tries   int
	Backoff time.Duration
}

func (m *Mover) defaults() (*http.Client, time.Duration, int, time.Duration) {
	c, t, n, b := m.Client, m.FileTimeout, m.Tries, m.Backoff
	if c == nil {
		c = http.DefaultClient
	}
	if t == 0 {
		t = 30 * time.Minute
	}
	if n == 0 {
		n = 4
	}
	if b == 0 {
		b = time.Second
	}
	return c, t, n, b
}

// DataError is a failed transfer, and whose fault it is.
type DataError struct {
	What     string // "input a.csv", "output /outputs/r.txt"
	JobFault bool
	Detail   string
}

func (e *DataError) Error() string { return e.What + ": " + e.Detail }

// copyBuffer is what one read and write of a transfer moves.
const copyBuffer = 1 << 20

// Budget is what the job's files may take in all, in bytes; shared by its
// inputs (and later its outputs). Negative: no bound.
type Budget struct{ Left int64 }

// Fetch gets each input into dir (created, 0755; each file 0644) and
// returns what it fetched. dir must not exist yet, or be empty.
func (m *Mover) Fetch(ctx context.Context, ins []runnerapi.LeaseInput, dir string, budget *Budget) ([]runnerapi.InputRecord, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, hostErr("inputs", err)
	}
	var out []runnerapi.InputRecord
	for _, in := range ins {
		rec, err := m.fetchOne(ctx, in, filepath.Join(dir, in.Name), budget)
		if err != nil {
			return out, err
		}
		out = append(out, rec)
	}
	return out, nil
}

func (m *Mover) fetchOne(ctx context.Context, in runnerapi.LeaseInput, path string, budget *Budget) (runnerapi.InputRecord, error) {
	what := "input " + in.Name
	if in.URL == "" {
		return runnerapi.InputRecord{}, &DataError{What: what, Detail: "the lease carries no URL for it (the server could not presign it)"}
	}
	req, err := exactRequest(ctx, http.MethodGet, in.URL, nil)
	if err != nil {
		return runnerapi.InputRecord{}, &DataError{What: what, JobFault: true, Detail: err.Error()}
	}
	var rec runnerapi.InputRecord
	err = m.try(ctx, what, func(ctx context.Context) (bool, error) {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
		if err != nil {
			return false, hostErr(what, err)
		}
		defer f.Close()
		resp, err := m.client().Do(req.Clone(ctx))
		if err != nil {
			return true, &DataError{What: what, Detail: "storage unreachable: " + err.Error()}
		}
		defer resp.Body.Close()
		if e := statusErr(what, "GET", resp); e != nil {
			return !e.JobFault, e
		}
		if budget.Left >= 0 && resp.ContentLength > budget.Left {
			return false, &DataError{What: what, JobFault: true, Detail: fmt.Sprintf("%d bytes, more than the %d the job's claim has left", resp.ContentLength, budget.Left)}
		}
		h := sha256.New()
		body := io.Reader(resp.Body)
		if budget.Left >= 0 {
			body = io.LimitReader(resp.Body, budget.Left+1)
		}
		n, err := io.CopyBuffer(io.MultiWriter(f, h), body, make([]byte, copyBuffer))
		switch {
		case isNoSpace(err):
			return false, hostErr(what, err)
		case err != nil:
			return true, &DataError{What: what, Detail: "reading it: " + err.Error()}
		case budget.Left >= 0 && n > budget.Left:
			return false, &DataError{What: what, JobFault: true, Detail: fmt.Sprintf("more than the %d bytes the job's claim has left", budget.Left)}
		}
		// Not synced: an input lost with the host is fetched again by the
		// attempt that runs instead.
		if err := f.Close(); err != nil {
			return false, hostErr(what, err)
		}
		rec = runnerapi.InputRecord{Name: in.Name, Key: in.Key, SHA256: hex.EncodeToString(h.Sum(nil)), Size: n, ETag: strings.Trim(resp.Header.Get("ETag"), `"`)}
		return false, nil
	})
	if err != nil {
		return runnerapi.InputRecord{}, err
	}
	if budget.Left >= 0 {
		budget.Left -= rec.Size
	}
	return rec, nil
}

// Upload PUTs each output from root (the directory mounted at /outputs)
// and returns what it uploaded. A missing output, or outputs past what the
// budget has left, are the job's fault.
func (m *Mover) Upload(ctx context.Context, outs []runnerapi.LeaseOutput, root string, budget *Budget) ([]runnerapi.OutputRecord, error) {
	var recs []runnerapi.OutputRecord
	for _, o := range outs {
		rec, err := m.uploadOne(ctx, o, root, budget)
		if err != nil {
			return recs, err
		}
		if budget.Left >= 0 {
			budget.Left -= rec.Size
		}
		recs = append(recs, rec)
	}
	return recs, nil
}

func (m *Mover) uploadOne(ctx context.Context, o runnerapi.LeaseOutput, root string, budget *Budget) (runnerapi.OutputRecord, error) {
	what := "output " + o.Path
	rel, ok := strings.CutPrefix(o.Path, runnerapi.OutputsDir+"/")
	if !ok || o.URL == "" {
		return runnerapi.OutputRecord{}, &DataError{What: what, Detail: "the lease carries no URL or path for it"}
	}
	path := filepath.Join(root, filepath.FromSlash(rel))
	var rec runnerapi.OutputRecord
	err := m.try(ctx, what, func(ctx context.Context) (bool, error) {
		f, err := openRegular(path)
		if err != nil {
			return false, &DataError{What: what, JobFault: true, Detail: err.Error()}
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return false, hostErr(what, err)
		}
		if budget.Left >= 0 && st.Size() > budget.Left {
			return false, &DataError{What: what, JobFault: true, Detail: fmt.Sprintf("%d bytes, more than the %d the job's claim has left", st.Size(), budget.Left)}
		}
		sum, md := sha256.New(), md5.New()
		req, err := exactRequest(ctx, http.MethodPut, o.URL, io.TeeReader(f, io.MultiWriter(sum, md)))
		if err != nil {
			return false, &DataError{What: what, Detail: err.Error()}
		}
		req.ContentLength = st.Size()
		resp, err := m.client().Do(req)
		if err != nil {
			return true, &DataError{What: what, Detail: "storage unreachable: " + err.Error()}
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		if e := statusErr(what, "PUT", resp); e != nil {
			return !e.JobFault, e
		}
		rec = runnerapi.OutputRecord{Key: o.Key, SHA256: hexSum(sum), Size: st.Size(), MD5: hexSum(md)}
		return false, nil
	})
	return rec, err
}

// openRegular opens an output the job wrote: a regular file, not a link
// (the job's container could point one anywhere on the host).
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, errors.New("the job did not write it")
		}
		if errors.Is(err, syscall.ELOOP) {
			return nil, errors.New("a symbolic link, not a file")
		}
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, errors.New("not a regular file")
	}
	return f, nil
}

// try runs one transfer, again after a retryable failure, with backoff.
func (m *Mover) try(ctx context.Context, what string, once func(context.Context) (bool, error)) error {
	_, timeout, tries, backoff := m.defaults()
	var err error
	for i := 0; i < tries; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return &DataError{What: what, Detail: ctx.Err().Error()}
			case <-time.After(backoff << (i - 1)):
			}
		}
		tctx, cancel := context.WithTimeout(ctx, timeout)
		var again bool
		again, err = once(tctx)
		cancel()
		if err == nil || !again {
			return err
		}
	}
	var e *DataError
	if errors.As(err, &e) {
		e.Detail = fmt.Sprintf("%s (%d tries)", e.Detail, tries)
	}
	return err
}

func (m *Mover) client() *http.Client {
	c, _, _, _ := m.defaults()
	return c
}

// exactRequest makes a request for raw exactly as given: Go sends a
// parsed URL's query as it was, and its path as it was escaped unless the
// escaping is one Go would redo (a raw space, say), which is refused
// rather than sent changed.
func exactRequest(ctx context.Context, method, raw string, body io.Reader) (*http.Request, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("not a URL: %v", err)
	}
	if u.Scheme != "https" && u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("not an http(s) URL")
	}
	rest := raw[len(u.Scheme)+3+len(u.Host):]
	path, _, _ := strings.Cut(rest, "?")
	path, _, _ = strings.Cut(path, "#")
	if path == "" {
		path = "/"
	}
	if u.EscapedPath() != path {
		return nil, fmt.Errorf("its path %q cannot be sent exactly as given", runnerapi.Clip(path, 200))
	}
	return http.NewRequestWithContext(ctx, method, raw, body)
}

// statusErr is the failure an answer says, if it is one.
func statusErr(what, method string, resp *http.Response) *DataError {
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return nil
	case c >= 500 || c == http.StatusTooManyRequests || c == http.StatusRequestTimeout:
		return &DataError{What: what, Detail: fmt.Sprintf("%s: the storage answered %s", method, resp.Status)}
	default: // 403: a signature refused or expired; 404: no such object
		return &DataError{What: what, JobFault: true, Detail: fmt.Sprintf("%s: the storage answered %s", method, resp.Status)}
	}
}

func hostErr(what string, err error) *DataError {
	if isNoSpace(err) {
		return &DataError{What: what, Detail: "this host's disk is full: " + err.Error()}
	}
	return &DataError{What: what, Detail: err.Error()}
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }
