package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runmesh/runmesh/pki"
)

// A heartbeat worker is a process of simulated runners: the parent hands it
// runners in a file (keys and certificates, one per line), tells it on
// standard input how many of them to run ("grow N"), and reads one line
// per heartbeat on standard output ("ok NANOSECONDS" or "err"). Workers let
// the simulated fleet hold more connections than one process may open.

func writeWorkerFile(path string, runners []*simRunner) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, r := range runners {
		key, err := pki.EncodePrivateKey(r.cert.PrivateKey)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s", base64.StdEncoding.EncodeToString(key))
		for _, der := range r.cert.Certificate {
			fmt.Fprintf(w, " %s", base64.StdEncoding.EncodeToString(der))
		}
		fmt.Fprintln(w)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

func readWorkerFile(path string) ([]*simRunner, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*simRunner
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			return nil, fmt.Errorf("%s: short line", path)
		}
		keyPEM, err := base64.StdEncoding.DecodeString(fields[0])
		if err != nil {
			return nil, err
		}
		key, err := pki.ParsePrivateKey(keyPEM)
		if err != nil {
			return nil, err
		}
		c := tls.Certificate{PrivateKey: key}
		for _, f := range fields[1:] {
			der, err := base64.StdEncoding.DecodeString(f)
			if err != nil {
				return nil, err
			}
			c.Certificate = append(c.Certificate, der)
		}
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
		out = append(out, &simRunner{cert: c})
	}
	return out, sc.Err()
}

// heartbeatWorker is the worker process's main.
func heartbeatWorker(ctx context.Context, file, rootFile, requestFile, addrs string, interval time.Duration, in io.Reader, out io.Writer) error {
	runners, err := readWorkerFile(file)
	if err != nil {
		return err
	}
	rootPEM, err := os.ReadFile(rootFile)
	if err != nil {
		return err
	}
	root, err := pki.ParseCertificates(rootPEM)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AddCert(root[0])
	request, err := os.ReadFile(requestFile)
	if err != nil {
		return err
	}
	targets := strings.Split(addrs, ",")

	var mu sync.Mutex // guards w
	w := bufio.NewWriter(out)
	go func() {
		for range time.Tick(200 * time.Millisecond) {
			mu.Lock()
			w.Flush()
			mu.Unlock()
		}
	}()
	report := reporterFunc(func(d time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			fmt.Fprintln(w, "err")
			return
		}
		fmt.Fprintln(w, "ok", int64(d))
	})

	active := 0
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "grow "))
		if err != nil || n > len(runners) {
			return fmt.Errorf("bad command %q", sc.Text())
		}
		// Connect the newcomers at a steady pace, each to one replica.
		for i := active; i < n; i++ {
			r := runners[i]
			r.request, r.addr, r.roots = request, targets[i%len(targets)], roots
			if err := r.connect(); err != nil {
				return fmt.Errorf("connect runner: %w", err)
			}
			go r.run(ctx, interval, report)
			time.Sleep(time.Second / 1000)
		}
		active = n
		mu.Lock()
		fmt.Fprintln(w, "grown", n)
		w.Flush()
		mu.Unlock()
	}
	return sc.Err()
}

// reporter receives each heartbeat's outcome.
type reporter interface{ add(time.Duration, error) }

type reporterFunc func(time.Duration, error)

func (f reporterFunc) add(d time.Duration, err error) { f(d, err) }

// workerProc is a heartbeat worker process.
type workerProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	grown chan int
}

func startWorker(ctx context.Context, base string, runners []*simRunner, rootFile, requestFile string, addrs []string, interval time.Duration, stats *beatStats) (*workerProc, error) {
	file := base + ".runners"
	if err := writeWorkerFile(file, runners); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "heartbeat-worker", "-file", file, "-root", rootFile, "-request", requestFile,
		"-addrs", strings.Join(addrs, ","), "-interval", interval.String())
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &workerProc{cmd: cmd, in: in, grown: make(chan int, 1)}
	go func() {
		sc := bufio.NewScanner(outPipe)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "err":
				stats.add(0, errors.New("heartbeat failed"))
			case strings.HasPrefix(line, "ok "):
				n, _ := strconv.ParseInt(line[3:], 10, 64)
				stats.add(time.Duration(n), nil)
			case strings.HasPrefix(line, "grown "):
				n, _ := strconv.Atoi(line[6:])
				w.grown <- n
			}
		}
		close(w.grown)
	}()
	return w, nil
}

// grow asks the worker to run its first n runners and waits until they
// are connected.
func (w *workerProc) grow(n int) error {
	if _, err := fmt.Fprintf(w.in, "grow %d\n", n); err != nil {
		return err
	}
	if _, ok := <-w.grown; !ok {
		return errors.New("a heartbeat worker exited")
	}
	return nil
}

func (w *workerProc) stop() {
	w.in.Close()
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
}

func fileLimit() uint64 {
	b, _ := os.ReadFile("/proc/self/limits")
	m := regexp.MustCompile(`Max open files\s+(\d+)`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseUint(string(m[1]), 10, 64)
	return n
}

// startServer runs runmesh-server serve and returns it with its runner
// listener's address, once it serves.

// simRunner is one simulated runner: a certificate and a connection.
type simRunner struct {
	cert    tls.Certificate
	request []byte
	addr    string
	roots   *x509.CertPool
	conn    *tls.Conn
	br      *bufio.Reader
}

func (r *simRunner) connect() error {
	conn, err := tls.Dial("tcp", r.addr, &tls.Config{
		RootCAs: r.roots, ServerName: "127.0.0.1",
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &r.cert, nil },
	})
	if err != nil {
		return err
	}
	r.conn, r.br = conn, bufio.NewReaderSize(conn, 1024)
	return nil
}

// beat sends one heartbeat on the kept-alive connection.
func (r *simRunner) beat() (time.Duration, error) {
	if r.conn == nil {
		if err := r.connect(); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	if _, err := r.conn.Write(r.request); err != nil {
		r.conn.Close()
		r.conn = nil
		return 0, err
	}
	resp, err := http.ReadResponse(r.br, nil)
	if err != nil {
		r.conn.Close()
		r.conn = nil
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		return took, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return took, nil
}

func (r *simRunner) run(ctx context.Context, interval time.Duration, stats reporter) {
	defer func() {
		if r.conn != nil {
			r.conn.Close()
		}
	}()
	// Start at a random point of the interval, as a fleet does.
	next := time.Duration(mrand.Int64N(int64(interval)))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		took, err := r.beat()
		stats.add(took, err)
		next = time.Duration(float64(interval) * (0.9 + 0.2*mrand.Float64()))
	}
}

type beatStats struct {
	mu   sync.Mutex // guards lat and errs
	lat  []time.Duration
	errs int
}

func (s *beatStats) add(d time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.errs++
		return
	}
	s.lat = append(s.lat, d)
}

func (s *beatStats) reset() {
	s.mu.Lock()
	s.lat, s.errs = s.lat[:0], 0
	s.mu.Unlock()
}

func (s *beatStats) take() ([]time.Duration, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.lat)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, s.errs
}
