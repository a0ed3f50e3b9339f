package buildinfo

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func vcsSettings(rev, when, modified string) []debug.BuildSetting {
	return []debug.BuildSetting{
		{Key: "-compiler", Value: "gc"},
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: rev},
		{Key: "vcs.time", Value: when},
		{Key: "vcs.modified", Value: modified},
	}
}

const rev = "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d"

func TestFromBuildInfo(t *testing.T) {
	when := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	cases := []struct {
		name     string
		bi       *debug.BuildInfo
		ok       bool
		override string
		want     Info
	}{
		{
			name: "release from a tagged checkout",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: ModulePath, Version: "v0.1.0"},
				Settings: vcsSettings(rev, "2026-11-26T04:00:00Z", "false")},
			ok:   true,
			want: Info{Version: "v0.1.0", Revision: rev, Time: when, GoVersion: "go1.26.8"},
		},
		{
			name: "modified checkout",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: ModulePath, Version: "v0.1.1-0.20261126040000-1a2b3c4d5e6f+dirty"},
				Settings: vcsSettings(rev, "2026-11-26T04:00:00Z", "true")},
			ok:   true,
			want: Info{Version: "v0.1.1-0.20261126040000-1a2b3c4d5e6f+dirty", Revision: rev, Time: when, Modified: true, GoVersion: "go1.26.8"},
		},
		{
			name: "source tree without VCS",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: ModulePath, Version: Devel}},
			ok:   true,
			want: Info{Version: Devel, GoVersion: "go1.26.8"},
		},
		{
			name:     "version set at link time",
			bi:       &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: ModulePath, Version: Devel}},
			ok:       true,
			override: "v0.1.0",
			want:     Info{Version: "v0.1.0", GoVersion: "go1.26.8"},
		},
		{
			name: "dependency of another program",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/app", Version: "v1.2.3"},
				Deps:     []*debug.Module{{Path: "golang.org/x/sync", Version: "v0.24.0"}, {Path: ModulePath, Version: "v0.1.0"}},
				Settings: vcsSettings(rev, "2026-11-26T04:00:00Z", "true")},
			ok:   true,
			want: Info{Version: "v0.1.0", GoVersion: "go1.26.8"},
		},
		{
			name: "replaced dependency",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/app"},
				Deps: []*debug.Module{{Path: ModulePath, Version: "v0.1.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v0.1.0-fork.1"}}}},
			ok:   true,
			want: Info{Version: "v0.1.0-fork.1", GoVersion: "go1.26.8"},
		},
		{
			name: "dependency replaced by a checkout",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "example.com/app"},
				Deps: []*debug.Module{{Path: ModulePath, Version: "v0.0.0-00010101000000-000000000000", Replace: &debug.Module{Path: "../dlm"}}}},
			ok:   true,
			want: Info{Version: Devel, GoVersion: "go1.26.8"},
		},
		{
			name: "no build information",
			want: Info{Version: Unknown, GoVersion: runtime.Version()},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := FromBuildInfo(c.bi, c.ok, c.override); got != c.want {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	when := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	cases := map[string]struct {
		info Info
		want string
	}{
		"full":   {Info{Version: "v0.1.0", Revision: rev, Time: when, Modified: true, GoVersion: "go1.26.8"}, "dlm v0.1.0 (rev 1a2b3c4d5e6f, 2026-11-26T04:00:00Z, modified) go1.26.8"},
		"clean":  {Info{Version: "v0.1.0", Revision: rev, Time: when, GoVersion: "go1.26.8"}, "dlm v0.1.0 (rev 1a2b3c4d5e6f, 2026-11-26T04:00:00Z) go1.26.8"},
		"no vcs": {Info{Version: Devel, GoVersion: "go1.26.8"}, "dlm (devel) go1.26.8"},
	}
	for name, c := range cases {
		if got := c.info.String(); got != c.want {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
}

func TestJSON(t *testing.T) {
	info := Info{Version: "v0.1.0", Revision: rev, Time: time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC), GoVersion: "go1.26.8"}
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":"v0.1.0","revision":"` + rev + `","time":"2026-11-26T04:00:00Z","modified":false,"go_version":"go1.26.8"}`
	if string(b) != want {
		t.Fatalf("%s\nwant %s", b, want)
	}
	b, _ = json.Marshal(Info{Version: Devel, GoVersion: "go1.26.8"})
	if want := `{"version":"(devel)","revision":"","modified":false,"go_version":"go1.26.8"}`; string(b) != want {
		t.Fatalf("%s\nwant %s", b, want)
	}
}

func TestLogValue(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Info("started", "build", Info{Version: "v0.1.0", Revision: rev, Modified: true, GoVersion: "go1.26.8"})
	for _, want := range []string{"build.version=v0.1.0", "build.revision=" + rev, "build.modified=true", "build.go=go1.26.8"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("no %q in %s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "build.time") {
		t.Errorf("an unknown time logged: %s", buf.String())
	}
}

// The running binary (this test) has build information: a version and the
// Go version it was built with.
func TestRead(t *testing.T) {
	info := Read()
	if info.Version == "" || info.Version == Unknown || info.GoVersion != runtime.Version() {
		t.Fatalf("Read() = %+v", info)
	}
	if Read() != info {
		t.Fatal("Read changed")
	}
	t.Logf("%s", info)
}
