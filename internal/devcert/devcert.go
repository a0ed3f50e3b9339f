// Package devcert makes a development certificate authority and the
// certificates a dlm deployment uses: a server certificate for the client
// ports, node certificates for Raft between nodes, and client certificates
// whose subject common name is the client's identity. Keys are ECDSA P-256.
//
// It is what `dlm certs` runs, and what the tests use to make their
// certificates. It is meant for development and tests: a production
// deployment should use its own PKI, with a CA key that never sits on a
// server's disk.
package devcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
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
	"time"
)

// Limits of Write.
const (
	// DefaultValidity is how long the certificates are valid by default.
	DefaultValidity = 365 * 24 * time.Hour
	// MinValidity and MaxValidity bound WithValidity.
	MinValidity = time.Hour
	MaxValidity = 10 * 365 * 24 * time.Hour
	// MaxNameBytes bounds a node id or client name, which names files and
	// becomes a certificate's common name.
	MaxNameBytes = 64
	// MaxNames bounds the node ids, and separately the client names, of
	// one call.
	MaxNames = 256
)

// File names in the directory, for a node id or client name n:
// ca.pem, ca-key.pem, server.pem, server-key.pem, raft-n.pem,
// raft-n-key.pem, client-n.pem, client-n-key.pem.
const (
	CAFile        = "ca.pem"
	CAKeyFile     = "ca-key.pem"
	ServerFile    = "server.pem"
	ServerKeyFile = "server-key.pem"
	// ServerCommonName is the server certificate's subject common name.
	ServerCommonName = "dlm-server"
)

// NodeFiles returns the certificate and key file names of node id.
func NodeFiles(id string) (cert, key string) { return "raft-" + id + ".pem", "raft-" + id + "-key.pem" }

// ClientFiles returns the certificate and key file names of client name.
func ClientFiles(name string) (cert, key string) {
	return "client-" + name + ".pem", "client-" + name + "-key.pem"
}

// ErrExists is returned, wrapped with the file's name, when a file Write
// would write exists and WithForce was not given.
var ErrExists = errors.New("devcert: file exists (use force to overwrite)")

// Option configures Write.
type Option func(*config)

type config struct {
	hosts    []string
	nodes    []string
	clients  []string
	server   bool
	validity time.Duration
	force    bool
}

// WithHosts sets the host names and IP addresses the server and node
// certificates are valid for (their subject alternative names); default
// 127.0.0.1, ::1 and localhost.
func WithHosts(hosts ...string) Option { return func(c *config) { c.hosts = hosts } }

// WithNodes adds a node certificate for each Raft node id: common name the
// id, the hosts as alternative names, usable as both TLS server and client
// (Raft connections authenticate both ways).
func WithNodes(ids ...string) Option { return func(c *config) { c.nodes = append(c.nodes, ids...) } }

// WithClients adds a client certificate for each name: common name the
// name (the identity the dlm server sees), client authentication only.
func WithClients(names ...string) Option {
	return func(c *config) { c.clients = append(c.clients, names...) }
}

// WithoutServer leaves out the server certificate: to add node or client
// certificates signed by a CA already in the directory.
func WithoutServer() Option { return func(c *config) { c.server = false } }

// WithValidity sets how long the certificates are valid, from now (default
// DefaultValidity, at least MinValidity, at most MaxValidity). A
// certificate signed by an existing CA never outlives the CA.
func WithValidity(d time.Duration) Option { return func(c *config) { c.validity = d } }

// WithForce overwrites existing files, the CA's included: a new CA is made
// even when the directory has one.
func WithForce() Option { return func(c *config) { c.force = true } }

// Result says what Write did.
type Result struct {
	// Files are the paths written, in order.
	Files []string
	// ReusedCA is true when the directory's CA signed the certificates.
	ReusedCA bool
}

// Write makes certificates in dir (created with mode 0700 if missing). It
// makes a new CA (ca.pem, ca-key.pem) unless the directory holds one and
// WithForce is not given, in which case that CA signs; then the server
// certificate (unless WithoutServer), and the node and client certificates
// asked for. Key files get mode 0600, certificates 0644. Without WithForce
// it refuses, before writing anything, if any file it would write exists
// (ErrExists).
func Write(dir string, opts ...Option) (Result, error) {
	c := config{hosts: []string{"127.0.0.1", "::1", "localhost"}, server: true, validity: DefaultValidity}
	for _, o := range opts {
		o(&c)
	}
	if err := c.check(); err != nil {
		return Result{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Result{}, fmt.Errorf("devcert: %w", err)
	}
	var res Result
	ca, caKey, err := loadCA(dir, c.force)
	switch {
	case err != nil:
		return Result{}, err
	case ca != nil:
		res.ReusedCA = true
	}

	var files []pemFile
	now := time.Now()
	if ca == nil {
		ca, caKey, files, err = newCA(now, c.validity)
		if err != nil {
			return Result{}, err
		}
	}
	leaf := func(name, cn string, dns []string, ips []net.IP, usage []x509.ExtKeyUsage) error {
		cert, key, err := newLeaf(ca, caKey, now, c.validity, cn, dns, ips, usage)
		if err != nil {
			return fmt.Errorf("devcert: %s: %w", cn, err)
		}
		files = append(files, pemFile{name + ".pem", "CERTIFICATE", cert, 0o644}, pemFile{name + "-key.pem", "PRIVATE KEY", key, 0o600})
		return nil
	}
	dns, ips := splitHosts(c.hosts)
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if c.server {
		if err := leaf("server", ServerCommonName, dns, ips, both); err != nil {
			return Result{}, err
		}
	}
	for _, id := range c.nodes {
		if err := leaf("raft-"+id, id, dns, ips, both); err != nil {
			return Result{}, err
		}
	}
	for _, n := range c.clients {
		if err := leaf("client-"+n, n, nil, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}); err != nil {
			return Result{}, err
		}
	}
	if !c.force {
		for _, f := range files {
			if _, err := os.Lstat(filepath.Join(dir, f.name)); !errors.Is(err, fs.ErrNotExist) {
				return Result{}, fmt.Errorf("%w: %s", ErrExists, filepath.Join(dir, f.name))
			}
		}
	}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if err := f.write(path, c.force); err != nil {
			return res, err
		}
		res.Files = append(res.Files, path)
	}
	return res, nil
}

// check validates the options.
func (c *config) check() error {
	if c.validity < MinValidity || c.validity > MaxValidity {
		return fmt.Errorf("devcert: validity %s is outside [%s, %s]", c.validity, MinValidity, MaxValidity)
	}
	if (c.server || len(c.nodes) > 0) && len(c.hosts) == 0 {
		return errors.New("devcert: server and node certificates need at least one host")
	}
	for _, h := range c.hosts {
		if h == "" || len(h) > 253 {
			return fmt.Errorf("devcert: bad host %q", h)
		}
	}
	for what, names := range map[string][]string{"node id": c.nodes, "client name": c.clients} {
		if len(names) > MaxNames {
			return fmt.Errorf("devcert: more than %d %ss", MaxNames, what)
		}
		seen := map[string]bool{}
		for _, n := range names {
			if err := checkName(n); err != nil {
				return fmt.Errorf("devcert: %s %q: %w", what, n, err)
			}
			if seen[n] {
				return fmt.Errorf("devcert: %s %q given twice", what, n)
			}
			seen[n] = true
		}
	}
	return nil
}

// checkName accepts 1 to MaxNameBytes letters, digits, '.', '_' and '-',
// not starting with '.' or '-': safe in a file name, and a valid dlm
// identity.
func checkName(n string) error {
	if n == "" || len(n) > MaxNameBytes {
		return fmt.Errorf("want 1 to %d characters", MaxNameBytes)
	}
	for i, r := range n {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' ||
			(i > 0 && (r == '.' || r == '-'))
		if !ok {
			return errors.New("want letters, digits, '.', '_' and '-' (not first)")
		}
	}
	return nil
}

func splitHosts(hosts []string) (dns []string, ips []net.IP) {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	return dns, ips
}

// loadCA loads dir's CA unless force; nil if there is none.
func loadCA(dir string, force bool) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPath, keyPath := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	if force {
		return nil, nil, nil
	}
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	switch {
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		return nil, nil, nil
	case certErr != nil || keyErr != nil:
		return nil, nil, fmt.Errorf("devcert: %s needs both %s and %s to reuse its CA (or force to make a new one)", dir, CAFile, CAKeyFile)
	}
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("devcert: load the CA: %w", err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("devcert: %s is not an ECDSA key", keyPath)
	}
	if !pair.Leaf.IsCA {
		return nil, nil, fmt.Errorf("devcert: %s is not a CA certificate", certPath)
	}
	return pair.Leaf, key, nil
}

// newCA makes a CA certificate and key.
func newCA(now time.Time, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, []pemFile, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("devcert: CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "dlm development CA", Organization: []string{"dlm"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("devcert: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("devcert: CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("devcert: CA key: %w", err)
	}
	return cert, key, []pemFile{{CAFile, "CERTIFICATE", der, 0o644}, {CAKeyFile, "PRIVATE KEY", keyDER, 0o600}}, nil
}

// newLeaf makes a certificate signed by ca, and its key (PKCS #8 DER).
func newLeaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, now time.Time, validity time.Duration,
	cn string, dns []string, ips []net.IP, usage []x509.ExtKeyUsage) (cert, key []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"dlm"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	cert, err = x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	key, err = x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("devcert: serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

// pemFile is one file to write.
type pemFile struct {
	name  string
	block string
	der   []byte
	mode  os.FileMode
}

// write writes f to path: a new file, or with force a temporary file
// renamed over path (so that a key file never has a wider mode, even for
// a moment).
func (f pemFile) write(path string, force bool) error {
	data := pem.EncodeToMemory(&pem.Block{Type: f.block, Bytes: f.der})
	if !force {
		fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%w: %s", ErrExists, path)
			}
			return fmt.Errorf("devcert: %w", err)
		}
		_, err = fh.Write(data)
		return errors.Join(wrap(err), wrap(fh.Chmod(f.mode)), wrap(fh.Close()))
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".devcert-*")
	if err != nil {
		return fmt.Errorf("devcert: %w", err)
	}
	_, err = tmp.Write(data)
	err = errors.Join(err, tmp.Chmod(f.mode), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("devcert: write %s: %w", path, err)
	}
	return nil
}

func wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("devcert: %w", err)
}
