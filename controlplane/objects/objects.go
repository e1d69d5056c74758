// Package objects is the control plane's object storage: an S3-compatible
// bucket whose objects jobs read and write through URLs the server
// presigns at lease time. The server holds the credentials; a runner sees
// only presigned URLs, each for one object, one method and a bounded time.
package objects

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/runmesh/runmesh/runnerapi"
)

// Config is `storage:` in server.yaml.
type Config struct {
	// Endpoint is the storage's URL: https://s3.example.com, or http:// on
	// a loopback address.
	Endpoint string `yaml:"endpoint"`
	Bucket   string `yaml:"bucket"`
	Region   string `yaml:"region"`
	// CredentialsFile holds the access key in AWS's shared credentials
	// format ([default] aws_access_key_id, aws_secret_access_key); it is
	// read at start-up and should be readable by the server only.
	CredentialsFile string `yaml:"credentials_file"`
	// CredentialsProfile is the file's section (default "default").
	CredentialsProfile string `yaml:"credentials_profile"`
}

// Enabled: a storage is configured.
func (c Config) Enabled() bool { return c.Endpoint != "" }

// MaxValidity is the longest a SigV4 presigned URL may be valid.
const MaxValidity = 7 * 24 * time.Hour

// Origin is where a runner must reach the storage: the installer checks
// it before the first job.
type Origin struct {
	Scheme string `json:"scheme"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
}

func (o Origin) String() string {
	return fmt.Sprintf("%s://%s", o.Scheme, net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
}

// Check says what is wrong with c, if anything; it reads nothing.
func (c Config) Check() error {
	if !c.Enabled() {
		return nil
	}
	u, err := url.Parse(c.Endpoint)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return fmt.Errorf("storage.endpoint: %q is not an http(s) URL", c.Endpoint)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.User != nil:
		return fmt.Errorf("storage.endpoint: %q: only scheme, host and port (the bucket goes in storage.bucket)", c.Endpoint)
	case u.Scheme == "http" && !runnerapi.IsLoopbackHost(u.Hostname()):
		return fmt.Errorf("storage.endpoint: %q: plain http only on a loopback address", c.Endpoint)
	case c.Bucket == "":
		return errors.New("storage.bucket: required with storage.endpoint")
	case c.CredentialsFile == "":
		return errors.New("storage.credentials_file: required with storage.endpoint")
	}
	return nil
}

// Bucket presigns URLs for the bucket's objects and checks what was
// uploaded.
type Bucket struct {
	client *minio.Client
	bucket string
	origin Origin
}

// Open reads the credentials and makes a client; it does not reach the
// storage.
func Open(c Config) (*Bucket, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	u, _ := url.Parse(c.Endpoint)
	profile := c.CredentialsProfile
	if profile == "" {
		profile = "default"
	}
	// A secret: not in a file everyone may read.
	st, err := os.Stat(c.CredentialsFile)
	if err != nil {
		return nil, fmt.Errorf("storage.credentials_file: %w", err)
	}
	if st.Mode().Perm()&0o004 != 0 {
		return nil, fmt.Errorf("storage.credentials_file %s: readable by everyone (chmod o-r)", c.CredentialsFile)
	}
	creds := credentials.NewFileAWSCredentials(c.CredentialsFile, profile)
	if v, err := creds.Get(); err != nil || v.AccessKeyID == "" {
		if err == nil {
			err = errors.New("no aws_access_key_id")
		}
		return nil, fmt.Errorf("storage.credentials_file %s [%s]: %w", c.CredentialsFile, profile, err)
	}
	client, err := minio.New(u.Host, &minio.Options{Creds: creds, Secure: u.Scheme == "https", Region: c.Region,
		BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	o := Origin{Scheme: u.Scheme, Host: u.Hostname()}
	o.Port, _ = strconv.Atoi(u.Port())
	if o.Port == 0 {
		o.Port = map[string]int{"https": 443, "http": 80}[u.Scheme]
	}
	return &Bucket{client: client, bucket: c.Bucket, origin: o}, nil
}

// Origin is where runners reach the storage.
func (s *Bucket) Origin() Origin { return s.origin }

// PresignGet is a URL that reads key for valid.
func (s *Bucket) PresignGet(ctx context.Context, key string, valid time.Duration) (string, error) {
	u, err := s.client.PresignedGetObject(ctx, s.bucket, key, min(valid, MaxValidity), nil)
	if err != nil {
		return "", fmt.Errorf("presign GET %s: %w", key, err)
	}
	return u.String(), nil
}

// PresignPut is a URL that writes key for valid.
func (s *Bucket) PresignPut(ctx context.Context, key string, valid time.Duration) (string, error) {
	u, err := s.client.PresignedPutObject(ctx, s.bucket, key, min(valid, MaxValidity))
	if err != nil {
		return "", fmt.Errorf("presign PUT %s: %w", key, err)
	}
	return u.String(), nil
}

// Object is what the storage says of an object.
type Object struct {
	Size int64
	// ETag without its quotes; for an object written by one PUT, S3
	// gives its MD5 in hex.
	ETag string
}

// ErrNoObject: the storage has no such object.
var ErrNoObject = errors.New("no such object")

// Stat asks the storage for key's size and ETag (a HEAD).
func (s *Bucket) Stat(ctx context.Context, key string) (Object, error) {
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).StatusCode == http.StatusNotFound {
			return Object{}, ErrNoObject
		}
		return Object{}, fmt.Errorf("storage: HEAD %s: %w", key, err)
	}
	return Object{Size: info.Size, ETag: strings.Trim(info.ETag, `"`)}, nil
}
