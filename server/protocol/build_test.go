package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/dlmhq/dlm/internal/buildinfo"
)

// A build's JSON in the status (protojson, as the HTTP API writes it) is
// the JSON of buildinfo.Info, as `dlm version --json` prints it.
func TestBuildJSONMatchesInfo(t *testing.T) {
	for name, info := range map[string]buildinfo.Info{
		"release": {Version: "v0.1.0", Revision: "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d",
			Time: time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC), Modified: true, GoVersion: "go1.26.8"},
		"no vcs": {Version: buildinfo.Devel, GoVersion: "go1.26.8"},
	} {
		t.Run(name, func(t *testing.T) {
			pb, err := protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}.Marshal(Build(info))
			if err != nil {
				t.Fatal(err)
			}
			plain, err := json.Marshal(info)
			if err != nil {
				t.Fatal(err)
			}
			var a, b map[string]any
			if err := json.Unmarshal(pb, &a); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(plain, &b); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("status build %s\nwant %s", pb, plain)
			}
		})
	}
}
