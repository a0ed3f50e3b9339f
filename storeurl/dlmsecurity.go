package storeurl

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"os"

	"github.com/dlmhq/dlm/driver"
)

// maxPEMBytes bounds a CA, certificate or key file named by a URL.
const maxPEMBytes = 1 << 20

// checkDLMSecurity checks a dlm URL's TLS and token parameters: TLS is on
// with dlms://, tls=true, or any of ca, cert, key and server_name; tls=false
// with them is a contradiction; cert and key go together; token_file needs
// TLS (a token is never sent in plaintext).
func (s *Spec) checkDLMSecurity() error {
	if s.Kind != KindDLM {
		return nil
	}
	implied := ""
	for _, p := range []string{"ca", "cert", "key", "server_name"} {
		if v, ok := s.Params[p]; ok {
			if v == "" {
				return fmt.Errorf("%w: parameter %s is empty", ErrBadURL, p)
			}
			implied = p
		}
	}
	if v, ok := s.Params["tls"]; ok {
		on, _ := s.boolean("tls", false)
		switch {
		case !on && s.TLS:
			return fmt.Errorf("%w: tls=%s contradicts dlms://", ErrBadURL, v)
		case !on && implied != "":
			return fmt.Errorf("%w: tls=%s contradicts %s=", ErrBadURL, v, implied)
		}
		s.TLS = s.TLS || on
	}
	s.TLS = s.TLS || implied != ""
	if (s.Params["cert"] == "") != (s.Params["key"] == "") {
		return fmt.Errorf("%w: cert and key go together (a client certificate and its key)", ErrBadURL)
	}
	if v, ok := s.Params["token_file"]; ok {
		if v == "" {
			return fmt.Errorf("%w: parameter token_file is empty", ErrBadURL)
		}
		if !s.TLS {
			return fmt.Errorf("%w: token_file needs TLS (dlms://, or tls=true): a token is never sent in plaintext", ErrBadURL)
		}
	}
	return nil
}

// DLMSecurity returns the TLS configuration of a dlm URL (nil without
// TLS), reading the files it names: ca (PEM CAs that verify the server;
// default the system's), cert and key (a client certificate for mutual
// TLS), server_name (the name to verify; default each host's). It also
// returns the URL's token_file, "" if none. Files are at most 1 MiB.
func (s *Spec) DLMSecurity() (*tls.Config, string, error) {
	if s.Kind != KindDLM || !s.TLS {
		return nil, "", nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.Params["server_name"]}
	if ca := s.Params["ca"]; ca != "" {
		data, err := readFile("ca", ca)
		if err != nil {
			return nil, "", err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(data) {
			return nil, "", fmt.Errorf("%w: ca=%s holds no PEM certificate", driver.ErrInvalid, ca)
		}
	}
	if cert := s.Params["cert"]; cert != "" {
		certPEM, err := readFile("cert", cert)
		if err != nil {
			return nil, "", err
		}
		keyPEM, err := readFile("key", s.Params["key"])
		if err != nil {
			return nil, "", err
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, "", fmt.Errorf("%w: cert=%s, key=%s: %v", driver.ErrInvalid, cert, s.Params["key"], err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, s.Params["token_file"], nil
}

// readFile reads the file that the URL's parameter param names, of at
// most maxPEMBytes.
func readFile(param, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", driver.ErrInvalid, param, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPEMBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s: %v", driver.ErrInvalid, param, path, err)
	}
	if len(data) > maxPEMBytes {
		return nil, fmt.Errorf("%w: %s: %s is larger than %d bytes", driver.ErrInvalid, param, path, maxPEMBytes)
	}
	return data, nil
}
