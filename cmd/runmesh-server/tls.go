package main

import (
	"crypto/tls"
	"fmt"

	"github.com/runmesh/runmesh/controlplane/config"
)

// adminTLS loads the admin listener's certificate, if the config names one.
func adminTLS(cfg *config.Config) (*tls.Config, error) {
	if cfg.Admin.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(cfg.Admin.TLSCertFile, cfg.Admin.TLSKeyFile)
	if err != nil {
		return nil, fmt.Errorf("admin TLS: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
