package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"os"
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
