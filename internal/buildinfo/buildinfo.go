// Package buildinfo tells how the running dlm was built: the module
// version, the VCS revision and time, whether the tree was modified, and
// the Go version, from the build information the Go toolchain embeds in
// every binary (runtime/debug.ReadBuildInfo).
//
// `go install github.com/dlmhq/dlm/cmd/dlm@v0.1.0` records v0.1.0; a build
// from a git checkout records the tag or a pseudo-version and the revision
// (unless -buildvcs=false); a build from a source tree without VCS records
// "(devel)". A packager can set the version at link time:
//
//	go build -ldflags "-X github.com/dlmhq/dlm/internal/buildinfo.version=v0.1.0" ./cmd/dlm
package buildinfo

import (
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// ModulePath is the path of dlm's Go module.
const ModulePath = "github.com/dlmhq/dlm"

// Devel is the version of a build from a source tree without VCS
// information, as the Go toolchain records it.
const Devel = "(devel)"

// Unknown is the version of a binary without build information.
const Unknown = "(unknown)"

// version is set at link time with -ldflags "-X
// github.com/dlmhq/dlm/internal/buildinfo.version=..."; when set it
// replaces the recorded module version. It is never assigned at run time.
var version string

// Info describes a build of dlm. Its JSON is that of the build field of
// the server's status (api/dlm.proto's BuildInfo).
type Info struct {
	// Version is dlm's module version: a release (v0.1.0), a
	// pseudo-version (v0.0.0-20261126040000-1a2b3c4d5e6f+dirty), Devel or
	// Unknown.
	Version string `json:"version"`
	// Revision is the VCS revision (a full git commit hash), "" when
	// unknown (as for a build with -buildvcs=false, or from a git
	// worktree, which the Go toolchain does not read).
	Revision string `json:"revision"`
	// Time is the revision's commit time (UTC), zero when unknown.
	Time time.Time `json:"time,omitzero"`
	// Modified is true when the tree had uncommitted changes.
	Modified bool `json:"modified"`
	// GoVersion is the Go toolchain's version, such as go1.26.8.
	GoVersion string `json:"go_version"`
}

// read reads the running binary's build information, once.
var read = sync.OnceValue(func() Info {
	bi, ok := debug.ReadBuildInfo()
	return FromBuildInfo(bi, ok, version)
})

// Read returns how the running binary was built.
func Read() Info { return read() }

// FromBuildInfo returns the Info of build information bi (ok as
// debug.ReadBuildInfo returns it). A non-empty override replaces the
// recorded version. When dlm is the main module, the revision, time and
// modified flag are those of the build's VCS settings; when dlm is a
// dependency of another program, the version is that of the dependency
// and the VCS settings, which describe the other program, are left out.
func FromBuildInfo(bi *debug.BuildInfo, ok bool, override string) Info {
	info := Info{Version: Unknown, GoVersion: runtime.Version()}
	if ok && bi != nil {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		if m := module(bi); m != nil {
			info.Version = m.Version
		}
		if bi.Main.Path == ModulePath || bi.Main.Path == "" {
			info.vcs(bi.Settings)
		}
	}
	if override != "" {
		info.Version = override
	}
	if info.Version == "" {
		info.Version = Devel
	}
	return info
}

// module returns dlm's module in bi: the main module, or the dependency
// (as replaced; a replacement by a directory is a source tree, Devel), or
// nil if dlm is in neither.
func module(bi *debug.BuildInfo) *debug.Module {
	if bi.Main.Path == ModulePath || bi.Main.Path == "" {
		return &bi.Main
	}
	for _, d := range bi.Deps {
		if d.Path != ModulePath {
			continue
		}
		switch {
		case d.Replace == nil:
			return d
		case d.Replace.Version == "": // replaced by a directory: a source tree
			return &debug.Module{Path: ModulePath, Version: Devel}
		}
		return d.Replace
	}
	return nil
}

// vcs fills the revision, time and modified flag from the build settings.
func (i *Info) vcs(settings []debug.BuildSetting) {
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339Nano, s.Value); err == nil {
				i.Time = t.UTC()
			}
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
}

// ShortRevision returns the first 12 characters of the revision, as Go's
// pseudo-versions show it.
func (i Info) ShortRevision() string {
	if len(i.Revision) > 12 {
		return i.Revision[:12]
	}
	return i.Revision
}

// String returns the one-line form, such as
//
//	dlm v0.1.0 (rev 1a2b3c4d5e6f, 2026-11-26T04:00:00Z, modified) go1.26.8
//
// leaving out what is unknown.
func (i Info) String() string {
	var b strings.Builder
	b.WriteString("dlm ")
	b.WriteString(i.Version)
	var vcs []string
	if i.Revision != "" {
		vcs = append(vcs, "rev "+i.ShortRevision())
	}
	if !i.Time.IsZero() {
		vcs = append(vcs, i.Time.Format(time.RFC3339))
	}
	if i.Modified {
		vcs = append(vcs, "modified")
	}
	if len(vcs) > 0 {
		b.WriteString(" (" + strings.Join(vcs, ", ") + ")")
	}
	if i.GoVersion != "" {
		b.WriteString(" " + i.GoVersion)
	}
	return b.String()
}

// LogValue logs the build as a group: version, revision, time, modified
// and go (what is unknown left out).
func (i Info) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("version", i.Version)}
	if i.Revision != "" {
		attrs = append(attrs, slog.String("revision", i.Revision))
	}
	if !i.Time.IsZero() {
		attrs = append(attrs, slog.Time("time", i.Time))
	}
	attrs = append(attrs, slog.Bool("modified", i.Modified), slog.String("go", i.GoVersion))
	return slog.GroupValue(attrs...)
}
