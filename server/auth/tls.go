package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// MaxPEMBytes bounds a certificate, key or CA file the server reads.
const MaxPEMBytes = 1 << 20

// ErrTLSConfig is returned, wrapped with the file and the cause, for a
// certificate, key or CA file that cannot be used.
var ErrTLSConfig = errors.New("dlm server: bad TLS configuration")

// LoadTLS reads the TLS configuration of the client ports (gRPC and HTTP):
// the server's certificate chain and key (PEM), and, if clientCAFile is not
// empty, the CAs that sign client certificates (mutual TLS: see
// Config.TLS). TLS 1.2 is the minimum.
func LoadTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := loadKeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCAFile != "" {
		if cfg.ClientCAs, err = LoadCAPool(clientCAFile); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// LoadRaftTLS reads the TLS configuration of Raft between nodes: this
// node's certificate and key, and the CA that signs every node's
// certificate. See NewRaftTLS. The node's own certificate must be one the
// CA signed for a node (server and client authentication), or LoadRaftTLS
// fails: a configuration that its peers would refuse is caught at start.
func LoadRaftTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	cert, err := loadKeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pool, err := LoadCAPool(caFile)
	if err != nil {
		return nil, err
	}
	if err := verifyNodeCert(cert.Leaf, nil, pool); err != nil {
		return nil, fmt.Errorf("%w: %s: not a node certificate of the CA in %s: %w", ErrTLSConfig, certFile, caFile, err)
	}
	return NewRaftTLS(cert, pool), nil
}

// NewRaftTLS returns the TLS configuration of Raft connections, for both
// ends: each node presents cert, and accepts a peer only if the peer's
// certificate chains to a CA in cas and is valid for both server and client
// authentication (a node certificate; a client certificate signed by the
// same CA is refused). The peer's host name is not checked, so Raft
// addresses may be IP addresses, advertised or translated ones: every
// node certificate of the CA is a member. Use a CA, or at least usages,
// dedicated to the cluster's nodes. TLS 1.3 only.
func NewRaftTLS(cert tls.Certificate, cas *x509.CertPool) *tls.Config {
	verify := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("dlm raft: the peer presented no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		if err := verifyNodeCert(cs.PeerCertificates[0], inter, cas); err != nil {
			return fmt.Errorf("dlm raft: peer certificate %q: %w", cs.PeerCertificates[0].Subject.CommonName, err)
		}
		return nil
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      cas,
		ClientCAs:    cas,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		// The server's chain is verified by VerifyConnection, against the
		// cluster CA, without a host name: see above.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection:   verify,
		MinVersion:         tls.VersionTLS13,
	}
}

// verifyNodeCert checks that c chains to cas and may serve as both TLS
// server and client.
func verifyNodeCert(c *x509.Certificate, inter, cas *x509.CertPool) error {
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := c.Verify(x509.VerifyOptions{Roots: cas, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			return err
		}
	}
	return nil
}

// LoadCAPool reads PEM certificates (at most MaxPEMBytes) into a pool.
func LoadCAPool(file string) (*x509.CertPool, error) {
	data, err := readPEM(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%w: %s: no PEM certificate in it", ErrTLSConfig, file)
	}
	return pool, nil
}

// loadKeyPair reads a certificate chain and its key, and checks that the
// certificate is valid now.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	if certFile == "" || keyFile == "" {
		return tls.Certificate{}, fmt.Errorf("%w: a certificate needs both its file and its key file", ErrTLSConfig)
	}
	certPEM, err := readPEM(certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := readPEM(keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%w: %s and %s: %w", ErrTLSConfig, certFile, keyFile, err)
	}
	if cert.Leaf == nil { // GODEBUG=x509keypairleaf=0 leaves it unset
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("%w: %s: %w", ErrTLSConfig, certFile, err)
		}
	}
	now := time.Now()
	if now.Before(cert.Leaf.NotBefore) || now.After(cert.Leaf.NotAfter) {
		return tls.Certificate{}, fmt.Errorf("%w: %s is valid from %s to %s, not now", ErrTLSConfig, certFile,
			cert.Leaf.NotBefore.Format(time.RFC3339), cert.Leaf.NotAfter.Format(time.RFC3339))
	}
	return cert, nil
}

// readPEM reads a file of at most MaxPEMBytes.
func readPEM(file string) ([]byte, error) {
	data, err := readLimited(file, MaxPEMBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTLSConfig, err)
	}
	return data, nil
}

// readLimited reads a file of at most limit bytes.
func readLimited(file string, limit int64) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", file, limit)
	}
	return data, nil
}
