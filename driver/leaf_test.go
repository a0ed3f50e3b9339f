package driver_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the import path of dlm's module.
const module = "github.com/dlmhq/dlm"

// nonStandardDeps returns the packages outside the standard library that
// the named packages compile, themselves included, as go list sees them.
// It skips the test when no go command is on PATH.
func nonStandardDeps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, pkgs...)
	out, err := exec.Command(gobin, args...).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", strings.Join(pkgs, " "), err)
	}
	return strings.Fields(string(out))
}

// TestDriverIsALeaf: package driver imports nothing but the standard
// library, so that every store and package dlm can import it and compile
// nothing else of the project.
func TestDriverIsALeaf(t *testing.T) {
	deps := nonStandardDeps(t, module+"/driver")
	if !slices.Equal(deps, []string{module + "/driver"}) {
		t.Errorf("package driver compiles %v; want the standard library only", deps)
	}
}

// TestStoresDoNotCompileTheLockTable: the stores that keep their locks
// elsewhere, and package dlm, do not compile the lock table (package
// locktable, the dlm server's state machine). The memory store is the lock
// table in process, and uses it.
func TestStoresDoNotCompileTheLockTable(t *testing.T) {
	for _, pkg := range []string{"", "/redis", "/redlock", "/postgres", "/etcd", "/dlmserver", "/storeurl"} {
		if slices.Contains(nonStandardDeps(t, module+pkg), module+"/locktable") {
			t.Errorf("%s compiles %s/locktable", module+pkg, module)
		}
	}
}
