package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readCert parses the first certificate of a PEM file.
func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" {
		t.Fatalf("%s: no certificate", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dlm certs makes a CA and server, node and client certificates that
// verify against it, with the names and usages asked for, keys readable by
// the owner only; it refuses to overwrite without -force, and signs more
// certificates with the CA it finds.
func TestCerts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	var out, errb bytes.Buffer
	code := runCerts([]string{"-dir", dir, "-hosts", "127.0.0.1,localhost,dlm.example", "-nodes", "node-1,node-2", "-clients", "alice,bob"}, &out, &errb)
	if code != 0 {
		t.Fatalf("dlm certs: exit %d\n%s", code, errb.String())
	}
	want := []string{"ca.pem", "ca-key.pem", "server.pem", "server-key.pem", "raft-node-1.pem", "raft-node-1-key.pem",
		"raft-node-2.pem", "raft-node-2-key.pem", "client-alice.pem", "client-alice-key.pem", "client-bob.pem", "client-bob-key.pem"}
	for _, name := range want {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		mode := fi.Mode().Perm()
		if strings.HasSuffix(name, "-key.pem") && mode != 0o600 {
			t.Errorf("%s: mode %o, want 0600", name, mode)
		}
		if !strings.Contains(out.String(), name) {
			t.Errorf("the output does not name %s:\n%s", name, out.String())
		}
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %o, want 0700", fi.Mode().Perm())
	}

	ca := readCert(t, filepath.Join(dir, "ca.pem"))
	if !ca.IsCA {
		t.Fatal("ca.pem is not a CA")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	verify := func(name string, usage x509.ExtKeyUsage, host string) *x509.Certificate {
		t.Helper()
		c := readCert(t, filepath.Join(dir, name))
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: host}); err != nil {
			t.Fatalf("%s for %v %q: %v", name, usage, host, err)
		}
		return c
	}
	srv := verify("server.pem", x509.ExtKeyUsageServerAuth, "dlm.example")
	if !slices.ContainsFunc(srv.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("127.0.0.1")) }) {
		t.Errorf("server.pem IPs %v lack 127.0.0.1", srv.IPAddresses)
	}
	verify("server.pem", x509.ExtKeyUsageClientAuth, "")
	if c := verify("raft-node-2.pem", x509.ExtKeyUsageServerAuth, "localhost"); c.Subject.CommonName != "node-2" {
		t.Errorf("node-2's CN %q", c.Subject.CommonName)
	}
	verify("raft-node-2.pem", x509.ExtKeyUsageClientAuth, "")
	if c := verify("client-alice.pem", x509.ExtKeyUsageClientAuth, ""); c.Subject.CommonName != "alice" {
		t.Errorf("alice's CN %q", c.Subject.CommonName)
	}
	alice := readCert(t, filepath.Join(dir, "client-alice.pem"))
	if _, err := alice.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("a client certificate is valid for server authentication")
	}
	key, _ := os.ReadFile(filepath.Join(dir, "client-alice-key.pem"))
	if b, _ := pem.Decode(key); b == nil || b.Type != "PRIVATE KEY" {
		t.Error("client-alice-key.pem is not a PKCS #8 key")
	} else if k, err := x509.ParsePKCS8PrivateKey(b.Bytes); err != nil {
		t.Error(err)
	} else if ek, ok := k.(*ecdsa.PrivateKey); !ok || ek.Curve != elliptic.P256() {
		t.Errorf("key of type %T, want ECDSA P-256", k)
	}

	// Again: refused, nothing overwritten.
	before, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	errb.Reset()
	if code := runCerts([]string{"-dir", dir, "-clients", "alice"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "exists") {
		t.Fatalf("second run: exit %d %s", code, errb.String())
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); !bytes.Equal(before, after) {
		t.Fatal("the refused run changed ca.pem")
	}
	// More clients, signed by the same CA.
	out.Reset()
	if code := runCerts([]string{"-dir", dir, "-server=false", "-clients", "carol"}, &out, &errb); code != 0 {
		t.Fatalf("adding carol: exit %d %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "existing CA") {
		t.Errorf("no word of the existing CA:\n%s", out.String())
	}
	verify("client-carol.pem", x509.ExtKeyUsageClientAuth, "")
	// -force makes everything new, the CA included.
	if code := runCerts([]string{"-dir", dir, "-force"}, &out, &errb); code != 0 {
		t.Fatalf("-force: exit %d %s", code, errb.String())
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); bytes.Equal(before, after) {
		t.Fatal("-force kept the CA")
	}
	if fi, _ := os.Stat(filepath.Join(dir, "server-key.pem")); fi.Mode().Perm() != 0o600 {
		t.Errorf("server-key.pem after -force: mode %o", fi.Mode().Perm())
	}

	for _, args := range [][]string{
		{"-dir", t.TempDir(), "-clients", "../evil"},
		{"-dir", t.TempDir(), "-clients", "a,a"},
		{"-dir", t.TempDir(), "-days", "0"},
		{"-dir", t.TempDir(), "extra"},
	} {
		if code := runCerts(args, &out, &errb); code != exitUsage {
			t.Errorf("dlm certs %q: exit %d, want %d", args, code, exitUsage)
		}
	}
}
