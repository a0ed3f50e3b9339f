package server

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/internal/buildinfo"
	"github.com/dlmhq/dlm/server/protocol"
)

// The status (gRPC and GET /v1/status) carries the build, in the JSON of
// buildinfo.Info, and /metrics has dlm_build_info at 1 with it in labels.
func TestBuildInfoInStatusAndMetrics(t *testing.T) {
	s := startServer(t, Config{})
	want := buildinfo.Read()

	st, err := s.Status(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := st.GetBuild(); b.GetVersion() == "" || !proto.Equal(b, protocol.Build(want)) {
		t.Fatalf("Status build %v, want %+v", b, want)
	}

	got := getJSON(t, s, "/v1/status")["build"]
	var wantJSON any
	plain, _ := json.Marshal(want)
	if err := json.Unmarshal(plain, &wantJSON); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, wantJSON) {
		t.Fatalf("/v1/status build %v, want %s", got, plain)
	}

	key := "dlm_build_info,go_version=" + want.GoVersion + ",modified=" + strconv.FormatBool(want.Modified) +
		",revision=" + want.Revision + ",version=" + want.Version
	if v := gather(t, s.metrics.reg).value(key); v != 1 {
		t.Fatalf("%s = %v, want 1", key, v)
	}
	resp, err := http.Get("http://" + s.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `dlm_build_info{go_version="`+want.GoVersion+`",`) {
		t.Fatalf("/metrics lacks dlm_build_info:\n%s", body)
	}
}
