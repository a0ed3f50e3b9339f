package devcert

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Write refuses before writing anything when one of its files exists, and
// reuses the directory's CA.
func TestWriteRefusesAndReuses(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(dir, WithClients("alice")); err != nil {
		t.Fatal(err)
	}
	_, err := Write(dir, WithoutServer(), WithClients("bob", "alice"))
	if !errors.Is(err, ErrExists) {
		t.Fatalf("writing alice again: %v, want ErrExists", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "client-bob.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused call wrote bob's certificate")
	}
	res, err := Write(dir, WithoutServer(), WithClients("bob"))
	if err != nil || !res.ReusedCA || len(res.Files) != 2 {
		t.Fatalf("adding bob: %+v %v", res, err)
	}
	if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, WithoutServer(), WithClients("carol")); err == nil {
		t.Fatal("a CA without its key was used")
	}
	for name, opts := range map[string][]Option{
		"bad name":       {WithClients("a/b")},
		"duplicate name": {WithNodes("n", "n")},
		"short validity": {WithValidity(MinValidity / 2)},
		"no host":        {WithHosts()},
	} {
		if _, err := Write(t.TempDir(), opts...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
