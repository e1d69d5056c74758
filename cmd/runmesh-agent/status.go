package main

import (
	"crypto/x509"
	"fmt"
	"time"
)

func statusLine(leaf *x509.Certificate) string {
	return fmt.Sprintf("enrolled; certificate %s valid until %s", leaf.SerialNumber, leaf.NotAfter.UTC().Format(time.RFC3339))
}
