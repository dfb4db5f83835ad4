package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// DevSet names the files GenerateDev wrote (or found).
type DevSet struct {
	// CAFile and CAKeyFile are the development CA.
	CAFile, CAKeyFile string
	// Nodes are each node's certificate and key, by node id from 0.
	Nodes []Files
}

// devValidity is how long development certificates are valid.
const devValidity = 365 * 24 * time.Hour

// GenerateDev writes a development CA (ca.crt, ca.key) and, for each node
// id from 0 to nodes-1, a certificate and key signed by it
// (node-ID.crt, node-ID.key) under dir: ECDSA P-256, valid for a year,
// for the names localhost and 127.0.0.1 and the given hosts, usable both
// as a server's and as a client's certificate (nodes are each other's
// clients). Files that exist are kept, not overwritten, so a dev
// cluster restarted keeps its CA; a node certificate missing beside an
// existing CA is signed by that CA. strata dev --secure uses it; it is
// not meant for production certificates.
func GenerateDev(dir string, hosts []string, nodes int) (DevSet, error) {
	if nodes < 1 {
		return DevSet{}, fmt.Errorf("dev certificates: %d nodes", nodes)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return DevSet{}, fmt.Errorf("dev certificates: %w", err)
	}
	set := DevSet{CAFile: filepath.Join(dir, "ca.crt"), CAKeyFile: filepath.Join(dir, "ca.key")}
	ca, caKey, err := loadOrMakeCA(set.CAFile, set.CAKeyFile)
	if err != nil {
		return DevSet{}, err
	}
	for i := range nodes {
		f := Files{
			CertFile: filepath.Join(dir, "node-"+strconv.Itoa(i)+".crt"),
			KeyFile:  filepath.Join(dir, "node-"+strconv.Itoa(i)+".key"),
			CAFile:   set.CAFile,
		}
		set.Nodes = append(set.Nodes, f)
		if exists(f.CertFile) && exists(f.KeyFile) {
			continue
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return DevSet{}, fmt.Errorf("dev certificates: %w", err)
		}
		tmpl := template("strata-node-" + strconv.Itoa(i))
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else if h != "" && h != "localhost" {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return DevSet{}, fmt.Errorf("dev certificates: node %d: %w", i, err)
		}
		if err := writePair(f.CertFile, f.KeyFile, der, key); err != nil {
			return DevSet{}, err
		}
	}
	return set, nil
}

func template(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"Strata development"}},
		NotBefore:    now.Add(-time.Hour), // clocks of a laptop's VMs disagree
		NotAfter:     now.Add(devValidity),
	}
}

func loadOrMakeCA(certFile, keyFile string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	if exists(certFile) && exists(keyFile) {
		cert, err := readCert(certFile)
		if err != nil {
			return nil, nil, err
		}
		kpem, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("dev certificates: %w", err)
		}
		block, _ := pem.Decode(kpem)
		if block == nil {
			return nil, nil, fmt.Errorf("dev certificates: %s: not PEM", keyFile)
		}
		key, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("dev certificates: %s: %w", keyFile, err)
		}
		return cert, key, nil
	}
	if exists(certFile) || exists(keyFile) {
		return nil, nil, fmt.Errorf("dev certificates: one of %s and %s exists without the other; remove it or add its pair", certFile, keyFile)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("dev certificates: %w", err)
	}
	tmpl := template("Strata development CA")
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("dev certificates: CA: %w", err)
	}
	if err := writePair(certFile, keyFile, der, key); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func readCert(name string) (*x509.Certificate, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("dev certificates: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("dev certificates: %s: no PEM certificate", name)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("dev certificates: %s: %w", name, err)
	}
	return cert, nil
}

// writePair writes a certificate and its key, the key readable by its
// owner only, each through a temporary file renamed into place.
func writePair(certFile, keyFile string, der []byte, key *ecdsa.PrivateKey) error {
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("dev certificates: %w", err)
	}
	if err := writeFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return err
	}
	return writeFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func writeFile(name string, data []byte, mode os.FileMode) error {
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("dev certificates: %w", err)
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("dev certificates: %w", err)
	}
	return nil
}

func exists(name string) bool {
	_, err := os.Stat(name)
	return !errors.Is(err, fs.ErrNotExist)
}

// DevClient writes a client certificate and key signed by the
// development CA in dir (GenerateDev makes it), with the given subject,
// as dir/name.crt and dir/name.key, unless both exist. Its principal on
// an SSL listener is "User:" + the subject (Principal).
func DevClient(dir, name string, subject pkix.Name) (Files, error) {
	f := Files{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key"), CAFile: filepath.Join(dir, "ca.crt")}
	if exists(f.CertFile) && exists(f.KeyFile) {
		return f, nil
	}
	if !exists(f.CAFile) {
		return Files{}, fmt.Errorf("dev certificates: no CA in %s (GenerateDev makes one)", dir)
	}
	ca, caKey, err := loadOrMakeCA(f.CAFile, filepath.Join(dir, "ca.key"))
	if err != nil {
		return Files{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, fmt.Errorf("dev certificates: %w", err)
	}
	tmpl := template("")
	tmpl.Subject = subject
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return Files{}, fmt.Errorf("dev certificates: client %s: %w", name, err)
	}
	return f, writePair(f.CertFile, f.KeyFile, der, key)
}
