package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/dlmhq/dlm/internal/buildinfo"
)

// dlm version, --version and -version print the one-line form; --json the
// JSON of the build.
func TestVersion(t *testing.T) {
	want := buildinfo.Read()
	line := want.String() + "\n"
	if !strings.HasPrefix(line, "dlm "+want.Version) || !strings.Contains(line, want.GoVersion) {
		t.Fatalf("one-line form %q lacks the version or Go version of %+v", line, want)
	}
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var out, errb bytes.Buffer
		if code := run(t.Context(), args, &out, &errb); code != 0 || out.String() != line || errb.Len() != 0 {
			t.Errorf("dlm %s: exit %d, %q, stderr %q; want %q", strings.Join(args, " "), code, out.String(), errb.String(), line)
		}
	}
	for _, args := range [][]string{{"version", "--json"}, {"--version", "-json"}} {
		var out, errb bytes.Buffer
		if code := run(t.Context(), args, &out, &errb); code != 0 {
			t.Fatalf("dlm %s: exit %d, stderr %q", strings.Join(args, " "), code, errb.String())
		}
		var got buildinfo.Info
		if err := json.Unmarshal(out.Bytes(), &got); err != nil || got != want {
			t.Errorf("dlm %s: %q (%v), want %+v", strings.Join(args, " "), out.String(), err, want)
		}
	}
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"version", "extra"}, &out, &errb); code != exitUsage || errb.Len() == 0 {
		t.Errorf("dlm version extra: exit %d, stderr %q; want %d and a message", code, errb.String(), exitUsage)
	}
}

// The dlm binary's version, its server's status and its server's
// dlm_build_info tell the same build.
func TestVersionOfServer(t *testing.T) {
	sharedServer(t)
	code, out, stderr := runDLM(t, nil, "version", "--json")
	if code != 0 {
		t.Fatalf("dlm version --json: exit %d: %s", code, stderr)
	}
	var info buildinfo.Info
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("dlm version --json: %v: %q", err, out)
	}
	if info.Version == "" || info.Version == buildinfo.Unknown || !strings.HasPrefix(info.GoVersion, "go") {
		t.Fatalf("dlm version --json: %+v", info)
	}
	code, line, _ := runDLM(t, nil, "--version")
	if code != 0 || line != info.String()+"\n" {
		t.Fatalf("dlm --version: exit %d, %q; want %q", code, line, info.String())
	}

	var want, got any
	if err := json.Unmarshal([]byte(out), &want); err != nil {
		t.Fatal(err)
	}
	var status struct {
		Build any `json:"build"`
	}
	if err := json.Unmarshal(httpGetBody(t, "http://"+shared.HTTPAddr()+"/v1/status"), &status); err != nil {
		t.Fatal(err)
	}
	got = status.Build
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("/v1/status build %v, want %s", got, out)
	}

	metric := `dlm_build_info{go_version="` + info.GoVersion + `",modified="` + strconv.FormatBool(info.Modified) +
		`",revision="` + info.Revision + `",version="` + info.Version + `"} 1` + "\n"
	if body := httpGetBody(t, "http://"+shared.HTTPAddr()+"/metrics"); !bytes.Contains(body, []byte(metric)) {
		t.Fatalf("/metrics lacks %q:\n%s", metric, body)
	}
}

// httpGetBody returns the body of a GET of url, failing on any status but
// 200.
func httpGetBody(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v\n%s", url, resp.Status, err, body)
	}
	return body
}
