package main

import (
	"bufio"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serverSetting is one setting of `dlm server`: its flag, environment
// variable and default, as `dlm server -h` prints them or as the table of
// docs/server.md lists them.
type serverSetting struct {
	flag, env, def string
	isBool         bool // -h only: a boolean flag
}

// noDefault is how the table of docs/server.md writes a default that is empty (a
// string flag) or off (a boolean flag).
const (
	noDefault  = "—"
	offDefault = "off"
)

var (
	helpEnvRE     = regexp.MustCompile(`\benv (DLM_[A-Z0-9_]+)\)`)
	helpDefaultRE = regexp.MustCompile(` \(default (.*)\)$`)
)

// cleanEnv returns the test's environment without any DLM_ variable.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLM_") {
			env = append(env, kv)
		}
	}
	return env
}

// serverHelp runs `dlm server -h` with no DLM_ variable set and returns its
// flags by name.
func serverHelp(t *testing.T) map[string]serverSetting {
	t.Helper()
	cmd := exec.Command(dlmBin(t), "server", "-h")
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dlm server -h: %v\n%s", err, out)
	}
	flags := map[string]serverSetting{}
	var cur *serverSetting
	var usage string
	done := func() {
		if cur == nil {
			return
		}
		m := helpEnvRE.FindStringSubmatch(usage)
		if m == nil {
			t.Errorf("dlm server -h: -%s names no environment variable (env DLM_...):\n%s", cur.flag, usage)
		} else {
			cur.env = m[1]
		}
		if m := helpDefaultRE.FindStringSubmatch(usage); m != nil {
			cur.def = m[1]
			if s, err := strconv.Unquote(m[1]); err == nil {
				cur.def = s
			}
		}
		flags[cur.flag] = *cur
		cur, usage = nil, ""
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "  -"):
			done()
			head := strings.Fields(line)
			cur = &serverSetting{flag: head[0], isBool: len(head) == 1}
		case cur != nil && strings.HasPrefix(line, "    \t"):
			usage += strings.TrimPrefix(line, "    \t")
		}
	}
	done()
	if len(flags) == 0 {
		t.Fatalf("dlm server -h lists no flags:\n%s", out)
	}
	return flags
}

// docSettings returns the rows of the table in docs/server.md's "Every
// setting" section, in order.
func docSettings(t *testing.T) []serverSetting {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "server.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Every setting\n")
	if !ok {
		t.Fatal(`docs/server.md has no "## Every setting" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var rows []serverSetting
	inTable := false
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break // the first table only
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if !inTable || strings.HasPrefix(cells[0], "---") {
			inTable = true // the header and the separator
			continue
		}
		if len(cells) != 4 {
			t.Fatalf("docs/server.md settings: want 4 cells (flag, environment, default, meaning):\n%s", line)
		}
		unquote := func(s string) string { return strings.TrimSuffix(strings.TrimPrefix(s, "`"), "`") }
		rows = append(rows, serverSetting{flag: unquote(cells[0]), env: unquote(cells[1]), def: unquote(cells[2])})
	}
	if len(rows) == 0 {
		t.Fatal("docs/server.md's settings section has no table")
	}
	return rows
}

// TestServerFlagsMatchDocs: every flag of `dlm server -h` is a row of
// the settings table of docs/server.md, and every row a flag, with the same
// environment variable and default.
func TestServerFlagsMatchDocs(t *testing.T) {
	help := serverHelp(t)
	seen := map[string]bool{}
	for _, row := range docSettings(t) {
		if seen[row.flag] {
			t.Errorf("docs/server.md: %s has two rows", row.flag)
		}
		seen[row.flag] = true
		h, ok := help[row.flag]
		if !ok {
			t.Errorf("docs/server.md lists %s, which dlm server does not have", row.flag)
			continue
		}
		if row.env != h.env {
			t.Errorf("%s: docs/server.md says %s, dlm server -h says %s", row.flag, row.env, h.env)
		}
		want := h.def
		switch {
		case h.def == "" && h.isBool:
			want = offDefault
		case h.def == "":
			want = noDefault
		}
		if row.def != want {
			t.Errorf("%s: docs/server.md's default is %q, dlm server -h says %q", row.flag, row.def, want)
		}
	}
	for name := range help {
		if !seen[name] {
			t.Errorf("dlm server %s (env %s) is missing from the settings table of docs/server.md", name, help[name].env)
		}
	}
}

// TestServerEnvSetsEveryFlag: each environment variable of the settings
// table sets its flag, through the flag set the server parses; a flag on
// the command line wins, and a value that cannot be read is an error
// naming the variable.
func TestServerEnvSetsEveryFlag(t *testing.T) {
	for _, kv := range os.Environ() { // t.Setenv restores them at the end
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "DLM_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	var defaults serverFlags
	fs, err := newServerFlagSet(&defaults)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	rows := docSettings(t)
	for _, row := range rows {
		fl := fs.Lookup(strings.TrimPrefix(row.flag, "-"))
		if fl == nil {
			t.Fatalf("docs/server.md lists %s, which dlm server does not have", row.flag)
		}
		var v string
		switch def := fl.Value.(flag.Getter).Get().(type) {
		case string:
			v = "from-" + row.env
		case bool:
			v = strconv.FormatBool(!def)
		case int:
			v = strconv.Itoa(def + 7)
		case uint64:
			v = strconv.FormatUint(def+7, 10)
		case time.Duration:
			v = (def + 1500*time.Millisecond).String()
		default:
			t.Fatalf("%s: a flag of type %T", row.flag, def)
		}
		t.Setenv(row.env, v)
		want[fl.Name] = v
	}

	var f serverFlags
	fs, err = newServerFlagSet(&f)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"-max-locks", "99"}); err != nil {
		t.Fatal(err)
	}
	want["max-locks"] = "99"
	for name, v := range want {
		if got := fs.Lookup(name).Value.String(); got != v {
			t.Errorf("-%s is %q, want %q from the environment", name, got, v)
		}
	}
	if f.limits.MaxLocks != 99 || f.sec.joinCA != "from-DLM_JOIN_CA" || f.raftTimeout != 2500*time.Millisecond {
		t.Errorf("settings not read into the server's flags: max locks %d, join CA %q, raft timeout %s",
			f.limits.MaxLocks, f.sec.joinCA, f.raftTimeout)
	}

	for env, val := range map[string]string{"DLM_MAX_LOCKS": "lots", "DLM_RAFT_TIMEOUT": "5"} {
		t.Setenv(env, val)
		_, err := newServerFlagSet(&serverFlags{})
		os.Unsetenv(env)
		if err == nil || !strings.Contains(err.Error(), env) {
			t.Errorf("%s=%s: error %v, want one naming the variable", env, val, err)
		}
	}
}
