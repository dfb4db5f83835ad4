package certs

import (
	"crypto/x509"
	"fmt"
	"os"
)

// ReadPool returns base (a new pool when nil) with the PEM certificates
// of file added: the CA a node, a client verb or the S3 client trusts. A
// file without a PEM certificate is an error, not an empty pool.
func ReadPool(file string, base *x509.CertPool) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if base == nil {
		base = x509.NewCertPool()
	}
	if !base.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", file)
	}
	return base, nil
}
