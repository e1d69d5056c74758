package runnerapi

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"
)

// A job's data: files it reads (inputs, fetched before it starts into
// /inputs, read-only) and files it writes (outputs, under /outputs,
// uploaded after it exits). Every byte moves through a URL the runner uses
// exactly as given: presigned by the server at lease time for an object
// key in its storage, or by the submitter.

// JobInput is a file a job reads, as submitted: an object key in the
// server's storage, or an https URL the submitter presigned.
type JobInput struct {
	// Name is the file's name under /inputs.
	Name string `json:"name"`
	Key  string `json:"key,omitempty"`
	URL  string `json:"url,omitempty"`
}

// JobOutput is a file a job writes, uploaded to an object key.
type JobOutput struct {
	// Path is the file in the container, under /outputs.
	Path string `json:"path"`
	Key  string `json:"key"`
}

// Where a job's data is in its container.
const (
	InputsDir  = "/inputs"
	OutputsDir = "/outputs"
)

// Bounds on a job's data.
const (
	MaxInputs   = 64
	MaxOutputs  = 64
	MaxKeyBytes = 1024 // S3's bound on a key
	MaxURLBytes = 8192
)

var fileName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// CheckInputs says what is wrong with a job's inputs, if anything.
func CheckInputs(ins []JobInput) error {
	if len(ins) > MaxInputs {
		return fmt.Errorf("inputs: at most %d", MaxInputs)
	}
	seen := map[string]bool{}
	for i, in := range ins {
		switch {
		case !fileName.MatchString(in.Name) || in.Name == "." || in.Name == "..":
			return fmt.Errorf("inputs[%d].name: %q is not a file name (letters, digits, '.', '_', '-'; 1 to 128)", i, in.Name)
		case seen[in.Name]:
			return fmt.Errorf("inputs[%d].name: %q is named twice", i, in.Name)
		case (in.Key == "") == (in.URL == ""):
			return fmt.Errorf("inputs[%d]: give a key or a url, one of them", i)
		}
		seen[in.Name] = true
		if in.Key != "" {
			if err := CheckKey(in.Key); err != nil {
				return fmt.Errorf("inputs[%d].key: %w", i, err)
			}
		} else if err := CheckInputURL(in.URL); err != nil {
			return fmt.Errorf("inputs[%d].url: %w", i, err)
		}
	}
	return nil
}

// CheckOutputs says what is wrong with a job's outputs, if anything.
func CheckOutputs(outs []JobOutput) error {
	if len(outs) > MaxOutputs {
		return fmt.Errorf("outputs: at most %d", MaxOutputs)
	}
	paths, keys := map[string]bool{}, map[string]bool{}
	for i, o := range outs {
		rest, under := strings.CutPrefix(o.Path, OutputsDir+"/")
		switch {
		case !under || rest == "" || path.Clean(o.Path) != o.Path || len(o.Path) > 1024 || !utf8.ValidString(o.Path) || hasControl(o.Path):
			return fmt.Errorf("outputs[%d].path: %q is not a clean path under %s/", i, o.Path, OutputsDir)
		case paths[o.Path]:
			return fmt.Errorf("outputs[%d].path: %q is named twice", i, o.Path)
		case keys[o.Key]:
			return fmt.Errorf("outputs[%d].key: %q is named twice", i, o.Key)
		}
		if err := CheckKey(o.Key); err != nil {
			return fmt.Errorf("outputs[%d].key: %w", i, err)
		}
		paths[o.Path], keys[o.Key] = true, true
	}
	return nil
}

// CheckKey says what is wrong with an object key.
func CheckKey(k string) error {
	switch {
	case k == "":
		return fmt.Errorf("empty")
	case len(k) > MaxKeyBytes:
		return fmt.Errorf("longer than %d bytes", MaxKeyBytes)
	case !utf8.ValidString(k) || hasControl(k):
		return fmt.Errorf("%q: not printable UTF-8", Clip(strings.ToValidUTF8(k, "?"), 80))
	case strings.HasPrefix(k, "/"):
		return fmt.Errorf("%q starts with '/'", Clip(k, 80))
	}
	for _, seg := range strings.Split(k, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("%q has a %q segment", Clip(k, 80), seg)
		}
	}
	return nil
}

// CheckInputURL says what is wrong with a submitter's URL: https (plain
// http only to a loopback address), no user info, bounded.
func CheckInputURL(s string) error {
	if len(s) > MaxURLBytes {
		return fmt.Errorf("longer than %d bytes", MaxURLBytes)
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("not an absolute URL")
	}
	switch {
	case u.User != nil:
		return fmt.Errorf("user info in a URL is refused (presign it instead)")
	case u.Scheme == "https":
	case u.Scheme == "http" && IsLoopbackHost(u.Hostname()):
	default:
		return fmt.Errorf("scheme %q: https only (http only to a loopback address)", u.Scheme)
	}
	return nil
}

// IsLoopbackHost: h is localhost or a loopback address (the hosts plain
// HTTP is allowed to).
func IsLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// RedactURL is u without its query (a presigned URL's signature and
// credential): what may be shown or logged of it.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a URL)"
	}
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	u.User, u.Fragment = nil, ""
	return u.String()
}

// PresignedURLBytes is what a URL the server presigns takes in a lease
// beyond its key (escaped, at most three bytes a byte): the storage's
// origin, the bucket and the SigV4 query.
const PresignedURLBytes = 1024

// DataLeaseBytes is at least what a job's inputs and outputs take in a
// lease answer, presigned: counted in the job's spec bound, so that an
// answer stays under LeaseAnswerBytes.
func DataLeaseBytes(ins []JobInput, outs []JobOutput) int {
	n := 0
	for _, in := range ins {
		n += len(in.Name) + len(in.URL) + 4*len(in.Key)
		if in.Key != "" {
			n += PresignedURLBytes
		}
	}
	for _, o := range outs {
		n += len(o.Path) + 4*len(o.Key) + PresignedURLBytes
	}
	return n
}

// LeaseInput is an input as a lease carries it: the URL to GET, exactly
// as given.
type LeaseInput struct {
	Name string `json:"name"`
	URL  string `json:"url"`
	// Key is the object key when the server presigned the URL.
	Key string `json:"key,omitempty"`
}

// LeaseOutput is an output as a lease carries it: the URL to PUT it to.
type LeaseOutput struct {
	Path string `json:"path"`
	Key  string `json:"key"`
	URL  string `json:"url"`
}

// InputRecord is what an attempt fetched of one input, as its result
// attests it.
type InputRecord struct {
	Name string `json:"name"`
	// Key is the object key when it was one.
	Key    string `json:"key,omitempty"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// ETag is the storage's, as it answered the GET ("" when none).
	ETag string `json:"etag,omitempty"`
}

var (
	sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)
	md5Hex    = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

// CheckRecords says what is wrong with a result's data records, if
// anything: a record that could not be true.
func CheckRecords(ins []InputRecord, outs []OutputRecord) error {
	if len(ins) > MaxInputs || len(outs) > MaxOutputs {
		return fmt.Errorf("inputs, outputs: at most %d and %d", MaxInputs, MaxOutputs)
	}
	for i, in := range ins {
		switch {
		case !fileName.MatchString(in.Name):
			return fmt.Errorf("inputs[%d].name: not a file name", i)
		case in.Key != "" && CheckKey(in.Key) != nil:
			return fmt.Errorf("inputs[%d].key: %v", i, CheckKey(in.Key))
		case !sha256Hex.MatchString(in.SHA256):
			return fmt.Errorf("inputs[%d].sha256: 64 lower-case hex digits", i)
		case in.Size < 0:
			return fmt.Errorf("inputs[%d].size: not negative", i)
		case len(in.ETag) > 80 || hasControl(in.ETag) || !utf8.ValidString(in.ETag):
			return fmt.Errorf("inputs[%d].etag: at most 80 printable bytes", i)
		}
	}
	for i, o := range outs {
		switch {
		case CheckKey(o.Key) != nil:
			return fmt.Errorf("outputs[%d].key: %v", i, CheckKey(o.Key))
		case !sha256Hex.MatchString(o.SHA256):
			return fmt.Errorf("outputs[%d].sha256: 64 lower-case hex digits", i)
		case !md5Hex.MatchString(o.MD5):
			return fmt.Errorf("outputs[%d].md5: 32 lower-case hex digits", i)
		case o.Size < 0:
			return fmt.Errorf("outputs[%d].size: not negative", i)
		}
	}
	return nil
}

// OutputRecord is what an attempt uploaded of one output.
type OutputRecord struct {
	Key    string `json:"key"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// MD5 is the body's, in hex: the ETag S3 gives an object written by
	// one PUT, which the server compares.
	MD5 string `json:"md5"`
}
