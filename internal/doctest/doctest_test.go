package doctest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/server"
	"github.com/dlmhq/dlm/server/raftnode"
)

// modulePath is dlm's module, which is not published yet: a program uses it
// from a checkout through a replace directive.
const modulePath = "github.com/dlmhq/dlm"

// checkout returns the directory of dlm's module, this checkout.
func checkout(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", modulePath).Output()
	if err != nil {
		t.Fatalf("find dlm's module: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// newcomerModule is a module of a newcomer's own, outside the checkout, set
// up with the commands the README gives:
//
//	go mod init example.com/newcomer
//	go mod edit -replace github.com/dlmhq/dlm=/path/to/dlm
//
// Its go commands run offline, from the module cache this checkout's
// dependencies were downloaded to (online, the same commands download them
// and check them against the checksum database).
type newcomerModule struct {
	t   *testing.T
	dir string
}

func newModule(t *testing.T) *newcomerModule {
	t.Helper()
	m := &newcomerModule{t: t, dir: t.TempDir()}
	m.goCmd("mod", "init", "example.com/newcomer")
	m.goCmd("mod", "edit", "-replace", modulePath+"="+checkout(t))
	return m
}

// goCmd runs the go command in the module and returns its output; it fails
// the test if the command fails.
func (m *newcomerModule) goCmd(args ...string) string {
	m.t.Helper()
	out, err := m.run(args...)
	if err != nil {
		m.t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), m.dir, err, out)
	}
	return string(out)
}

// run runs the go command in the module, offline.
func (m *newcomerModule) run(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(m.t.Context(), 10*time.Minute) // a clean build on a busy machine
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = m.dir
	cmd.Env = append(os.Environ(),
		"GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	return cmd.CombinedOutput()
}

// write puts a file in the module.
func (m *newcomerModule) write(name string, data []byte) {
	m.t.Helper()
	p := filepath.Join(m.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		m.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		m.t.Fatal(err)
	}
}

// startServer starts a dlm server in this process on free loopback ports.
func startServer(t *testing.T) *server.Server {
	t.Helper()
	fast := 50 * time.Millisecond
	srv, err := server.Start(server.Config{
		HTTPAddr: "127.0.0.1:0",
		Node: raftnode.Config{InMemory: true, Raft: func(c *raft.Config) {
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = fast, fast, fast
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := srv.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	return srv
}

// A newcomer's module outside the checkout uses dlm through the replace
// line, builds the first program, and the program takes and releases a
// lock on a real dlm server.
func TestFromCheckout(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "first", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := newModule(t)
	m.write("main.go", src)
	m.goCmd("mod", "tidy")
	gomod, err := os.ReadFile(filepath.Join(m.dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(gomod, []byte("require "+modulePath+" v0.0.0-")) {
		t.Errorf("go mod tidy did not require dlm:\n%s", gomod)
	}
	bin := filepath.Join(t.TempDir(), "first")
	m.goCmd("build", "-o", bin, ".")

	srv := startServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "DLM_STORE=dlm://"+srv.Addr())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the first program: %v\n%s", err, out)
	}
	t.Logf("the first program says: %s", out)
	tok, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "holding reports/nightly with token ")
	if n, err := strconv.ParseUint(tok, 10, 64); !ok || err != nil || n == 0 {
		t.Fatalf("the first program printed %q, want a fencing token", out)
	}

	// It released the lock: another client takes it at once.
	store, err := dlmserver.Dial(ctx, srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	l, err := dlm.New(store).Acquire(ctx, "reports/nightly", dlm.WithWait(0))
	if err != nil {
		t.Fatalf("after the program: %v, want the lock free", err)
	}
	l.Release(ctx)
}

// snippet is a fenced Go block of a markdown file.
type snippet struct {
	file string // relative to the checkout
	line int    // of the opening fence
	code string
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

// program reports whether the block is a complete program: its first line
// that is neither blank nor a comment is "package main".
func (s snippet) program() bool {
	for l := range strings.Lines(s.code) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		return l == "package main"
	}
	return false
}

// goBlocks returns the ```go blocks of a markdown file.
func goBlocks(root, file string) ([]snippet, error) {
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil, err
	}
	var blocks []snippet
	var cur *snippet
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```go") && strings.TrimSpace(trimmed[len("```go"):]) == "":
			cur = &snippet{file: file, line: n}
		case cur != nil && trimmed == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.code += line + "\n"
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a ```go block is not closed", file, cur.line)
	}
	return blocks, sc.Err()
}

// docBlocks returns the programs and the fragments among the ```go blocks
// of files (relative to root).
func docBlocks(root string, files []string) (programs, fragments []snippet, err error) {
	for _, f := range files {
		blocks, err := goBlocks(root, f)
		if err != nil {
			return nil, nil, err
		}
		for _, b := range blocks {
			if b.program() {
				programs = append(programs, b)
			} else {
				fragments = append(fragments, b)
			}
		}
	}
	return programs, fragments, nil
}

// buildPrograms builds every program in the module, each in a directory of
// its own, with one go build (which names the directory of each error). It
// returns an error naming each program that does not build.
func (m *newcomerModule) buildPrograms(programs []snippet) error {
	m.t.Helper()
	dirs := make(map[string]snippet)
	for _, p := range programs {
		dir := "snippets/" + strings.NewReplacer("/", "_", ".", "_").Replace(p.file) + "_L" + strconv.Itoa(p.line)
		dirs[dir] = p
		m.write(filepath.Join(dir, "main.go"), []byte(p.code))
	}
	m.goCmd("mod", "tidy")
	out, err := m.run("build", "./snippets/...")
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return err
	}
	var errs []error
	for dir, p := range dirs {
		if bytes.Contains(out, []byte(dir+"/")) || bytes.Contains(out, []byte(dir+"\n")) {
			errs = append(errs, fmt.Errorf("the program at %s does not build (line N of main.go is line %d+N of %s)", p, p.line, p.file))
		}
	}
	if len(errs) == 0 {
		errs = append(errs, err) // not a program's fault
	}
	return fmt.Errorf("%w\n%s", errors.Join(errs...), out)
}

// Every ```go block of README.md and docs/*.md that is a complete program
// builds in a newcomer's module; the blocks that are fragments are counted
// and named, not built.
func TestDocPrograms(t *testing.T) {
	root := checkout(t)
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, rel)
	}
	programs, fragments, err := docBlocks(root, files)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d Go programs to build in %d files; %d blocks are fragments, not built: %v",
		len(programs), len(files), len(fragments), fragments)
	// The README's first program is the one TestFromCheckout builds and
	// runs against a real server.
	first, err := os.ReadFile(filepath.Join("testdata", "first", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(programs) == 0 || programs[0].file != "README.md" || strings.TrimSpace(programs[0].code) != strings.TrimSpace(string(first)) {
		t.Fatalf("the README's first Go program must be internal/doctest/testdata/first/main.go as it is; programs: %v", programs)
	}
	if err := newModule(t).buildPrograms(programs); err != nil {
		t.Fatal(err)
	}
	t.Logf("built %d programs: %v", len(programs), programs)
}

// The doc test tells a program from a fragment and names the program that
// does not build, and only that one.
func TestDocProgramsBroken(t *testing.T) {
	programs, fragments, err := docBlocks(".", []string{"testdata/programs.md"})
	if err != nil {
		t.Fatal(err)
	}
	if len(programs) != 2 || len(fragments) != 2 {
		t.Fatalf("programs %v, fragments %v: want 2 and 2", programs, fragments)
	}
	err = newModule(t).buildPrograms(programs)
	if err == nil {
		t.Fatal("the broken program built")
	}
	t.Logf("the error:\n%v", err)
	good, broken := programs[0].String(), programs[1].String()
	msg := err.Error()
	if !strings.Contains(msg, "program at "+broken+" does not build") || strings.Contains(msg, "program at "+good+" ") {
		t.Errorf("the error does not name %s alone:\n%s", broken, msg)
	}
}
