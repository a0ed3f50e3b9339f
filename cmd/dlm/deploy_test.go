package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/testenv"
)

// The systemd units of deploy/ are started here as systemd would start
// them: each unit's ExecStart= command line, in an environment made only
// of what systemd sets and the unit's Environment= and EnvironmentFile=
// (later assignments winning, and EnvironmentFile= over Environment=).
// Only what must change to run unprivileged, in parallel with other
// tests, changes:
//
//   - ExecStart='s program is the dlm binary built for the tests, not
//     /usr/local/bin/dlm;
//   - %S (/var/lib) is a temporary directory, so that the StateDirectory=,
//     and with it DLM_DATA, is in it;
//   - /etc/dlm/X (EnvironmentFile=) is deploy/X of this checkout;
//   - every host:port of the environment, and the defaults of DLM_ADDR,
//     DLM_HTTP_ADDR and DLM_RAFT_ADDR when the unit leaves them unset, is
//     a free loopback port instead (the same one wherever it appears, so
//     that DLM_PEERS and DLM_JOIN still name the other nodes);
//   - the process runs as the test's user, in a temporary working
//     directory, without User=, the sandbox and the resource limits, which
//     need systemd (systemd-analyze verify checks those lines).

// systemdPath is the PATH systemd gives a service.
const systemdPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// unit is what the test reads of a unit file's [Service] section.
type unit struct {
	path      string
	execStart []string
	env       []string // Environment= assignments, in order
	envFiles  []string // EnvironmentFile= paths, in order
	stateDir  string
}

// readUnit reads the [Service] section of a unit file.
func readUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{path: path}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case strings.HasSuffix(line, `\`):
			t.Fatalf("%s:%d: continued lines are not read by this test", path, n)
		case line[0] == '[':
			section = line
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s:%d: not key=value: %s", path, n, line)
		}
		if section != "[Service]" {
			continue
		}
		switch key {
		case "ExecStart":
			if strings.ContainsAny(val, `"'$;`) || strings.ContainsAny(val[:1], "-@+!:") {
				t.Fatalf("%s:%d: ExecStart= with quotes, variables or prefixes is not read by this test: %s", path, n, val)
			}
			u.execStart = strings.Fields(val)
		case "Environment":
			if strings.ContainsAny(val, `"'\`) {
				t.Fatalf("%s:%d: quoted Environment= is not read by this test: %s", path, n, val)
			}
			u.env = append(u.env, strings.Fields(val)...)
		case "EnvironmentFile":
			u.envFiles = append(u.envFiles, val)
		case "StateDirectory":
			u.stateDir = val
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(u.execStart) < 2 || u.execStart[0] != "/usr/local/bin/dlm" || u.execStart[1] != "server" {
		t.Fatalf("%s: ExecStart= %q, want /usr/local/bin/dlm server ...", path, u.execStart)
	}
	return u
}

// specifiers expands the unit specifiers the units use: %i (the instance),
// %S (the state directory root, here stateRoot) and %%.
func specifiers(t *testing.T, s, instance, stateRoot string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i++; i == len(s) {
			t.Fatalf("a lone %% at the end of %q", s)
		}
		switch s[i] {
		case 'i':
			b.WriteString(instance)
		case 'S':
			b.WriteString(stateRoot)
		case '%':
			b.WriteByte('%')
		default:
			t.Fatalf("specifier %%%c in %q is not known to this test", s[i], s)
		}
	}
	return b.String()
}

// readEnvFile reads an environment file as systemd does for the forms the
// deploy files use: VAR=value lines, comments starting with # or ;.
func readEnvFile(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.TrimSpace(k) != k || strings.ContainsAny(v, `"'\`) {
			t.Fatalf("%s:%d: not a plain VAR=value line: %s", path, n+1, line)
		}
		env = append(env, k+"="+v)
	}
	return env
}

// deployDir is this checkout's deploy/.
func deployDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// hostPortRE matches host:port of an IPv4 address in a setting.
var hostPortRE = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}:\d+\b`)

// loopback gives each host:port of the units a free loopback port of its
// own, the same one every time.
type loopback map[string]string

func (l loopback) addr(t *testing.T, hostPort string) string {
	if a, ok := l[hostPort]; ok {
		return a
	}
	a := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	l[hostPort] = a
	return a
}

// service is a unit's server process started as the unit says.
type service struct {
	name     string
	env      map[string]string
	stateDir string
	cmd      *exec.Cmd
	stderr   *syncBuffer
	done     chan struct{}
	code     int
}

// startUnit starts the server of unit u, instance instance (empty for a
// unit that is not a template), with its state under stateRoot and its
// addresses mapped by ports.
func startUnit(t *testing.T, u unit, instance, stateRoot string, ports loopback) *service {
	t.Helper()
	name := filepath.Base(u.path)
	if instance != "" {
		name = strings.Replace(name, "@.", "@"+instance+".", 1)
	}
	s := &service{name: name, env: map[string]string{"PATH": systemdPath}, stderr: &syncBuffer{}, done: make(chan struct{})}
	if u.stateDir != "" {
		s.stateDir = filepath.Join(stateRoot, specifiers(t, u.stateDir, instance, stateRoot))
		if err := os.MkdirAll(s.stateDir, 0o700); err != nil {
			t.Fatal(err)
		}
		s.env["STATE_DIRECTORY"] = s.stateDir
	}
	set := func(kv string) {
		k, v, _ := strings.Cut(kv, "=")
		s.env[k] = v
	}
	for _, kv := range u.env {
		set(specifiers(t, kv, instance, stateRoot))
	}
	for _, path := range u.envFiles {
		path = specifiers(t, path, instance, stateRoot)
		rest, ok := strings.CutPrefix(path, "/etc/dlm/")
		if !ok {
			t.Fatalf("%s: EnvironmentFile=%s is not in /etc/dlm", u.path, path)
		}
		for _, kv := range readEnvFile(t, filepath.Join(deployDir(t), rest)) {
			set(kv)
		}
	}
	for k, def := range map[string]string{"DLM_ADDR": defaultAddr, "DLM_HTTP_ADDR": defaultHTTPAddr, "DLM_RAFT_ADDR": defaultRaftAddr} {
		if _, ok := s.env[k]; !ok {
			s.env[k] = def
		}
	}
	for k, v := range s.env {
		s.env[k] = hostPortRE.ReplaceAllStringFunc(v, func(hp string) string { return ports.addr(t, hp) })
	}
	var env []string
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	t.Logf("%s: %s with\n%s", s.name, strings.Join(u.execStart, " "), strings.Join(env, "\n"))

	s.cmd = exec.Command(dlmBin(t), u.execStart[1:]...)
	s.cmd.Env = env
	s.cmd.Dir = t.TempDir()
	s.cmd.Stdout, s.cmd.Stderr = s.stderr, s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(s.done)
		s.cmd.Wait()
		s.code = s.cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop sends SIGTERM, as systemctl stop does, and returns the exit code.
func (s *service) stop(t *testing.T) int {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second): // TimeoutStopSec=
		s.cmd.Process.Kill()
		<-s.done
		t.Errorf("%s: not stopped 30 s after SIGTERM:\n%s", s.name, s.stderr)
	}
	return s.code
}

// get returns the status code of GET path on the service's HTTP address,
// 0 if it does not answer.
func (s *service) get(path string) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + s.env["DLM_HTTP_ADDR"] + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitLeaderKnown waits until s knows the cluster's leader (its status
// names it), up to 60 s.
func (s *service) waitLeaderKnown(t *testing.T) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var st struct {
			LeaderID string `json:"leader_id"`
		}
		if resp, err := c.Get("http://" + s.env["DLM_HTTP_ADDR"] + "/v1/status"); err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err == nil && st.LeaderID != "" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s knows no leader after 60s:\n%s", s.name, s.stderr)
		}
		time.Sleep(20 * time.Millisecond) // polling its status: nothing to wait on
	}
}

// waitReady waits until exactly one of services answers 200 on /readyz
// (it leads and serves), and returns it.
func waitReady(t *testing.T, services ...*service) *service {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var ready []*service
		for _, s := range services {
			select {
			case <-s.done:
				t.Fatalf("%s exited (%d):\n%s", s.name, s.code, s.stderr)
			default:
			}
			if s.get("/readyz") == 200 {
				ready = append(ready, s)
			}
		}
		if len(ready) == 1 {
			return ready[0]
		}
		if time.Now().After(deadline) {
			for _, s := range services {
				t.Logf("%s:\n%s", s.name, s.stderr)
			}
			t.Fatalf("%d of %d nodes ready after 60s, want 1", len(ready), len(services))
		}
		time.Sleep(20 * time.Millisecond) // polling /readyz: nothing to wait on
	}
}

// clientAddrs returns the services' gRPC addresses, separated by commas.
func clientAddrs(services ...*service) string {
	var a []string
	for _, s := range services {
		a = append(a, s.env["DLM_ADDR"])
	}
	return strings.Join(a, ",")
}

// lockThrough takes and releases a lock on the servers with dlm run.
func lockThrough(t *testing.T, name string, services ...*service) {
	t.Helper()
	code, out, stderr := runDLM(t, nil, "run", storeFlag(clientAddrs(services...)), "--lock", name, "--wait", "30s", "--", "echo", "ran")
	if code != 0 || out != "ran\n" {
		t.Fatalf("dlm run --lock %s: exit %d %q\n%s", name, code, out, stderr)
	}
}

// TestDeploySingleNode: dlm.service's command and environment start a
// durable server with its data in the StateDirectory, which serves and
// stops cleanly on SIGTERM; a copy of the stopped node's data dir (the
// backup docs/operations.md describes) starts a server with the same state,
// its fencing tokens raised above the copy's.
func TestDeploySingleNode(t *testing.T) {
	u := readUnit(t, filepath.Join(deployDir(t), "dlm.service"))
	s := startUnit(t, u, "", t.TempDir(), loopback{})
	waitReady(t, s)
	if s.get("/healthz") != 200 {
		t.Errorf("/healthz does not answer 200")
	}
	lockThrough(t, "deploy/single", s)
	if _, err := os.Stat(filepath.Join(s.stateDir, "LOCK")); err != nil {
		t.Errorf("the data dir is not the StateDirectory %s: %v", s.stateDir, err)
	}
	token := s.lastToken(t)
	if code := s.stop(t); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0:\n%s", code, s.stderr)
	}
	if !strings.Contains(s.stderr.String(), "data="+s.stateDir) {
		t.Errorf("the log does not name the data dir %s:\n%s", s.stateDir, s.stderr)
	}

	restored := t.TempDir()
	if err := os.CopyFS(filepath.Join(restored, "dlm"), os.DirFS(s.stateDir)); err != nil {
		t.Fatal(err)
	}
	r := startUnit(t, u, "", restored, loopback{})
	waitReady(t, r)
	if got := r.lastToken(t); got <= token || token == 0 {
		t.Errorf("started from the copy: last token %d, want above %d as before the stop (the restore margin)", got, token)
	}
	lockThrough(t, "deploy/restored", r)
}

// lastToken returns the service's dlm_server_last_token.
func (s *service) lastToken(t *testing.T) uint64 {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + s.env["DLM_HTTP_ADDR"] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "dlm_server_last_token "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("dlm_server_last_token %q: %v", v, err)
			}
			return uint64(n)
		}
	}
	t.Fatalf("%s: no dlm_server_last_token in /metrics", s.name)
	return 0
}

// TestDeployCluster: dlm@node-1..3 with deploy/node-N.env make a cluster
// that elects a leader and grants a lock; dlm@node-4 with node-4.env joins
// it, stays a member when restarted (it asks to join again), and leaves it
// as docs/operations.md says: stopped, then removed.
func TestDeployCluster(t *testing.T) {
	u := readUnit(t, filepath.Join(deployDir(t), "dlm@.service"))
	root, ports := t.TempDir(), loopback{}
	var nodes []*service
	for _, id := range []string{"node-1", "node-2", "node-3"} {
		nodes = append(nodes, startUnit(t, u, id, root, ports))
	}
	leader := waitReady(t, nodes...)
	if got := leader.env["DLM_NODE_ID"]; !strings.Contains(leader.stderr.String(), "id="+got) {
		t.Errorf("%s does not log its id %s:\n%s", leader.name, got, leader.stderr)
	}
	lockThrough(t, "deploy/cluster", nodes...)

	var https []string
	for _, n := range nodes {
		https = append(https, n.env["DLM_HTTP_ADDR"])
	}
	members := func(want func(string) bool) string {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			code, out, stderr := runDLM(t, nil, "cluster", "members", "--http", strings.Join(https, ","))
			if code == 0 && want(out) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("dlm cluster members: exit %d\n%s%s", code, out, stderr)
			}
			time.Sleep(20 * time.Millisecond) // polling the listing: nothing to wait on
		}
	}
	fourth := startUnit(t, u, "node-4", root, ports)
	members(func(out string) bool { return strings.Count(out, "voter") == 4 && strings.Contains(out, "node-4") })
	lockThrough(t, "deploy/four", nodes...)

	// Restarted, node-4 asks to join again: it stays a member.
	if code := fourth.stop(t); code != 0 {
		t.Errorf("%s: exit %d after SIGTERM:\n%s", fourth.name, code, fourth.stderr)
	}
	fourth = startUnit(t, u, "node-4", root, ports)
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(fourth.stderr.String(), "joined the cluster") {
		select {
		case <-fourth.done:
			t.Fatalf("%s restarted, exited (%d):\n%s", fourth.name, fourth.code, fourth.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s restarted, not joined again after 60s:\n%s", fourth.name, fourth.stderr)
		}
		time.Sleep(20 * time.Millisecond) // polling its log: nothing to wait on
	}
	members(func(out string) bool { return strings.Count(out, "voter") == 4 && strings.Contains(out, "node-4") })
	fourth.waitLeaderKnown(t) // else SIGTERM stops it while starting: exit 143

	if code := fourth.stop(t); code != 0 {
		t.Errorf("%s: exit %d after SIGTERM:\n%s", fourth.name, code, fourth.stderr)
	}
	if code, out, stderr := runDLM(t, nil, "cluster", "remove", "--http", strings.Join(https, ","), "node-4"); code != 0 {
		t.Fatalf("dlm cluster remove node-4: exit %d\n%s%s", code, out, stderr)
	}
	members(func(out string) bool { return strings.Count(out, "voter") == 3 && !strings.Contains(out, "node-4") })
	lockThrough(t, "deploy/three", nodes...)
}

// TestDeployUnitsVerify runs systemd-analyze verify on each unit, with
// ExecStart='s program replaced by the test's dlm binary (verify wants it
// to exist); it must print nothing (it exits 0 on unknown keys and bad
// values, after a warning).
func TestDeployUnitsVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed: the units are not verified")
	}
	dir := t.TempDir()
	for _, name := range []string{"dlm.service", "dlm@.service"} {
		b, err := os.ReadFile(filepath.Join(deployDir(t), name))
		if err != nil {
			t.Fatal(err)
		}
		unitText := strings.ReplaceAll(string(b), "ExecStart=/usr/local/bin/dlm ", "ExecStart="+dlmBin(t)+" ")
		if err := os.WriteFile(filepath.Join(dir, name), []byte(unitText), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"dlm.service", "dlm@node-1.service"} {
		out, err := exec.Command(sa, "verify", filepath.Join(dir, name)).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
		}
	}
}

// TestDeployEnvFile: deploy/dlm.env names every environment variable of
// `dlm server -h` and no other, each with its default where it has one.
func TestDeployEnvFile(t *testing.T) {
	path := filepath.Join(deployDir(t), "dlm.env")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	line := regexp.MustCompile(`(?m)^#?(DLM_[A-Z0-9_]+)=(.*)$`)
	for _, m := range line.FindAllStringSubmatch(string(b), -1) {
		if _, dup := listed[m[1]]; dup {
			t.Errorf("%s: %s appears twice", path, m[1])
		}
		listed[m[1]] = m[2]
	}
	if len(listed) == 0 {
		t.Fatalf("%s lists no variable", path)
	}
	known := map[string]bool{}
	for _, f := range serverHelp(t) {
		known[f.env] = true
		v, ok := listed[f.env]
		switch {
		case !ok:
			t.Errorf("%s does not list %s (%s)", path, f.env, f.flag)
		case f.env == "DLM_DATA": // the unit's StateDirectory, not the flag's default
		case f.def != "" && v != f.def:
			t.Errorf("%s: %s=%s, but its default is %s", path, f.env, v, f.def)
		case f.isBool && v != "false":
			t.Errorf("%s: %s=%s, but its default is false", path, f.env, v)
		}
	}
	for env := range listed {
		if !known[env] {
			t.Errorf("%s lists %s, which dlm server does not read", path, env)
		}
	}
}
