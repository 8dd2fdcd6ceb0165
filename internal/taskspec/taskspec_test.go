package taskspec

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

const sum = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func TestURIs(t *testing.T) {
	t.Parallel()
	uri := func(f func(u *slacklinev1.CommandInfo_URI)) []*slacklinev1.CommandInfo_URI {
		u := &slacklinev1.CommandInfo_URI{Value: "https://example.com/files/app.tar.gz"}
		f(u)
		return []*slacklinev1.CommandInfo_URI{u}
	}
	tests := []struct {
		name    string
		uris    []*slacklinev1.CommandInfo_URI
		wantErr string // "" means valid
	}{
		{"plain", uri(func(*slacklinev1.CommandInfo_URI) {}), ""},
		{"all flags", uri(func(u *slacklinev1.CommandInfo_URI) { u.Sha256, u.Cache, u.Extract = sum, true, "tgz" }), ""},
		{"file scheme", uri(func(u *slacklinev1.CommandInfo_URI) { u.Value = "file:///etc/shadow" }), "command.uris[0].value"},
		{"ftp scheme", uri(func(u *slacklinev1.CommandInfo_URI) { u.Value = "ftp://h/x" }), "only http and https"},
		{"no host", uri(func(u *slacklinev1.CommandInfo_URI) { u.Value = "http:///x" }), "no host"},
		{"credentials", uri(func(u *slacklinev1.CommandInfo_URI) { u.Value = "http://u:p@h/x" }), "user information"},
		{"short sum", uri(func(u *slacklinev1.CommandInfo_URI) { u.Sha256 = "abc" }), "command.uris[0].sha256"},
		{"cache without sum", uri(func(u *slacklinev1.CommandInfo_URI) { u.Cache = true }), "command.uris[0].cache"},
		{"bad extract", uri(func(u *slacklinev1.CommandInfo_URI) { u.Extract = "rar" }), "command.uris[0].extract"},
		{"executable archive", uri(func(u *slacklinev1.CommandInfo_URI) { u.Extract, u.Executable = "zip", true }), "command.uris[0].executable"},
		{"absolute output", uri(func(u *slacklinev1.CommandInfo_URI) { u.OutputFile = "/etc/passwd" }), "absolute"},
		{"dotdot output", uri(func(u *slacklinev1.CommandInfo_URI) { u.OutputFile = "a/../../x" }), "command.uris[0].output_file"},
		{"dotdot clean output", uri(func(u *slacklinev1.CommandInfo_URI) { u.OutputFile = "../x" }), "leaves the sandbox"},
		{"no file name", uri(func(u *slacklinev1.CommandInfo_URI) { u.Value = "http://h/" }), "set output_file"},
		{"no file name extracted", uri(func(u *slacklinev1.CommandInfo_URI) { u.Value, u.Extract = "http://h/", "tar" }), ""},
		{"nil", []*slacklinev1.CommandInfo_URI{nil}, "command.uris[0]: empty"},
		{"too many", make([]*slacklinev1.CommandInfo_URI, MaxURIs+1), "at most 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := URIs(tt.uris)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("URIs: %v, want valid", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("URIs: %v, want an ErrInvalid naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestHealthCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		hc      *slacklinev1.HealthCheck
		want    Health
		wantErr string
	}{
		{
			name: "http defaults",
			hc:   &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_HTTP, Http: &slacklinev1.HealthCheck_HTTPCheck{Port: 8080}},
			want: Health{Type: slacklinev1.HealthCheck_TYPE_HTTP, Port: 8080, Path: "/", Scheme: "http",
				Delay: 15 * time.Second, Interval: 10 * time.Second, Timeout: 20 * time.Second, Grace: 10 * time.Second, ConsecutiveFailures: 3},
		},
		{
			name: "tcp explicit",
			hc: &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_TCP, Tcp: &slacklinev1.HealthCheck_TCPCheck{Port: 22},
				DelaySeconds: proto.Float64(0), IntervalSeconds: proto.Float64(1), TimeoutSeconds: proto.Float64(0.5),
				GracePeriodSeconds: proto.Float64(0), ConsecutiveFailures: proto.Uint32(1)},
			want: Health{Type: slacklinev1.HealthCheck_TYPE_TCP, Port: 22, Interval: time.Second, Timeout: 500 * time.Millisecond, ConsecutiveFailures: 1},
		},
		{name: "no type", hc: &slacklinev1.HealthCheck{}, wantErr: "health_check.type"},
		{name: "http no port", hc: &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_HTTP}, wantErr: "health_check.http.port"},
		{name: "tcp big port", hc: &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_TCP, Tcp: &slacklinev1.HealthCheck_TCPCheck{Port: 70000}}, wantErr: "health_check.tcp.port"},
		{name: "http host in path", hc: &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_HTTP, Http: &slacklinev1.HealthCheck_HTTPCheck{Port: 80, Path: "//evil.example/x"}}, wantErr: "health_check.http.path"},
		{name: "http relative path", hc: &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_HTTP, Http: &slacklinev1.HealthCheck_HTTPCheck{Port: 80, Path: "health"}}, wantErr: "health_check.http.path"},
		{name: "http bad scheme", hc: &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_HTTP, Http: &slacklinev1.HealthCheck_HTTPCheck{Port: 80, Scheme: "gopher"}}, wantErr: "health_check.http.scheme"},
		{name: "command empty", hc: &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_COMMAND}, wantErr: "health_check.command.value"},
		{name: "interval too short", hc: &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_TCP, Tcp: &slacklinev1.HealthCheck_TCPCheck{Port: 1}, IntervalSeconds: proto.Float64(0.01)}, wantErr: "health_check.interval_seconds"},
		{name: "negative delay", hc: &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_TCP, Tcp: &slacklinev1.HealthCheck_TCPCheck{Port: 1}, DelaySeconds: proto.Float64(-1)}, wantErr: "health_check.delay_seconds"},
		{name: "zero timeout", hc: &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_TCP, Tcp: &slacklinev1.HealthCheck_TCPCheck{Port: 1}, TimeoutSeconds: proto.Float64(0)}, wantErr: "health_check.timeout_seconds"},
		{name: "zero failures", hc: &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_TCP, Tcp: &slacklinev1.HealthCheck_TCPCheck{Port: 1}, ConsecutiveFailures: proto.Uint32(0)}, wantErr: "health_check.consecutive_failures"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := HealthCheck(tt.hc)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("HealthCheck: %v, want an error naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got.Command = nil
			if got != tt.want {
				t.Fatalf("HealthCheck = %+v, want %+v", got, tt.want)
			}
		})
	}
}
