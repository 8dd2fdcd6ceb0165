package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/slackline/slackline/internal/server"
)

// TestRPCMetrics: each call is counted by procedure and code, timed, and
// the procedures named up front are exported at 0 before any call.
func TestRPCMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := server.NewRPCMetrics(reg, "/x.v1.X/Y")
	if n := testutil.ToFloat64(mustCounter(t, reg, "slackline_rpc_server_handled_total", `procedure="/x.v1.X/Y"`)); n != 0 {
		t.Fatalf("initial count %v", n)
	}
	checker := &failingChecker{}
	mux := http.NewServeMux()
	mux.Handle(grpchealth.NewHandler(checker, connect.WithInterceptors(m.Interceptor())))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	body := strings.NewReader("{}")
	call := func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/grpc.health.v1.Health/Check", body)
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		body = strings.NewReader("{}")
	}
	call()
	checker.fail = true
	call()
	call()
	const health = "/grpc.health.v1.Health/Check"
	for code, want := range map[string]float64{"ok": 1, "permission_denied": 2} {
		got := testutil.ToFloat64(mustCounter(t, reg, "slackline_rpc_server_handled_total", `code="`+code+`",procedure="`+health+`"`))
		if got != want {
			t.Errorf("handled{code=%s} = %v, want %v", code, got, want)
		}
	}
	if n := testutil.CollectAndCount(reg, "slackline_rpc_server_handling_seconds"); n != 1 {
		t.Errorf("%d handling-time series, want 1", n)
	}
}

// failingChecker is healthy until fail is set, then refuses.
type failingChecker struct{ fail bool }

func (c *failingChecker) Check(context.Context, *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if c.fail {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("no"))
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

// mustCounter finds the one series of name whose labels contain match.
func mustCounter(t *testing.T, reg *prometheus.Registry, name, match string) prometheus.Collector {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, metric := range f.GetMetric() {
			var labels []string
			for _, l := range metric.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			if strings.Contains(strings.Join(labels, ","), match) {
				return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"}, metric.GetCounter().GetValue)
			}
		}
	}
	t.Fatalf("no %s{%s}", name, match)
	return nil
}

// TestProcessMetricsAndBuildInfo: go_*, process_* and slackline_build_info
// are registered.
func TestProcessMetricsAndBuildInfo(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	server.RegisterProcess(reg, "slackline-test")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range families {
		seen[f.GetName()] = true
		if f.GetName() == "slackline_build_info" {
			l := f.GetMetric()[0].GetLabel()
			if len(l) != 4 || f.GetMetric()[0].GetGauge().GetValue() != 1 {
				t.Errorf("slackline_build_info %v", f)
			}
		}
	}
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes", "slackline_build_info"} {
		if !seen[name] {
			t.Errorf("%s not exported", name)
		}
	}
}

// TestErrorLogIsSlog: net/http's error log writes slog records in the
// daemon's format (here JSON).
func TestErrorLogIsSlog(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&out, nil))
	server.ErrorLog(logger).Printf("http: TLS handshake error from 127.0.0.1:1234: EOF")
	var rec map[string]any
	if err := json.Unmarshal(out.Bytes(), &rec); err != nil {
		t.Fatalf("not a JSON record: %v: %s", err, out.String())
	}
	if rec["level"] != "WARN" || rec["msg"] != "http: TLS handshake error from 127.0.0.1:1234: EOF" || rec["source"] != "net/http" {
		t.Errorf("record %v", rec)
	}
}
