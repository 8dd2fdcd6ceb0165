package health

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// loopback dials 127.0.0.1: the task's own address in these tests. It
// records the ports it was asked for.
type loopback struct{ ports chan uint16 }

func (l loopback) DialTask(ctx context.Context, _ string, port uint16) (net.Conn, error) {
	select {
	case l.ports <- port:
	default:
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
}

type exitCode int

// pausedExec is the exitCode of an execer that finds the task paused.
const pausedExec exitCode = -1

func (e exitCode) ExecTask(_ context.Context, id string, _ *slacklinev1.CommandInfo) (int, string, error) {
	if e == pausedExec {
		return 0, "", fmt.Errorf("%w: container %s frozen", ErrPaused, id)
	}
	return int(e), "checking\nnot ready yet\n", nil
}

func port(t *testing.T, url string) uint16 {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return uint16(n)
}

func TestProbes(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "127.0.0.1:"+strconv.Itoa(int(port(t, "http://"+r.Host))) {
			w.WriteHeader(http.StatusTeapot)
		}
	})
	mux.HandleFunc("/down", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) })
	// A redirect is an answer, not followed (it would leave the task).
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://192.0.2.1/elsewhere", http.StatusFound)
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tlsSrv := httptest.NewTLSServer(mux)
	t.Cleanup(tlsSrv.Close)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := port(t, "http://"+closed.Addr().String())
	closed.Close()

	httpCheck := func(url, path string) Policy {
		scheme := "http"
		if strings.HasPrefix(url, "https") {
			scheme = "https"
		}
		return Policy{Type: slacklinev1.HealthCheck_TYPE_HTTP, Port: port(t, url), Path: path, Scheme: scheme}
	}
	tests := []struct {
		name    string
		policy  Policy
		exec    exitCode
		timeout time.Duration
		ok      bool
		detail  string
	}{
		{"http 200", httpCheck(srv.URL, "/ok"), 0, 5 * time.Second, true, ""},
		{"https 200", httpCheck(tlsSrv.URL, "/ok"), 0, 5 * time.Second, true, ""},
		{"http 503", httpCheck(srv.URL, "/down"), 0, 5 * time.Second, false, "503"},
		{"http 404", httpCheck(srv.URL, "/nothing"), 0, 5 * time.Second, false, "404"},
		{"http 302 not followed", httpCheck(srv.URL, "/moved"), 0, 5 * time.Second, true, ""},
		{"http hangs", httpCheck(srv.URL, "/hang"), 0, 50 * time.Millisecond, false, "deadline"},
		{"http refused", Policy{Type: slacklinev1.HealthCheck_TYPE_HTTP, Port: closedPort, Path: "/", Scheme: "http"}, 0, 5 * time.Second, false, "refused"},
		{"tcp open", Policy{Type: slacklinev1.HealthCheck_TYPE_TCP, Port: port(t, srv.URL)}, 0, 5 * time.Second, true, ""},
		{"tcp refused", Policy{Type: slacklinev1.HealthCheck_TYPE_TCP, Port: closedPort}, 0, 5 * time.Second, false, "refused"},
		{"command 0", Policy{Type: slacklinev1.HealthCheck_TYPE_COMMAND}, 0, 5 * time.Second, true, ""},
		{"command 3", Policy{Type: slacklinev1.HealthCheck_TYPE_COMMAND}, 3, 5 * time.Second, false, "code 3: not ready yet"},
		{"command paused", Policy{Type: slacklinev1.HealthCheck_TYPE_COMMAND}, pausedExec, 5 * time.Second, false, "c1 frozen"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dial := loopback{ports: make(chan uint16, 4)}
			p := NewProbes(dial, tt.exec)
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			ok, detail, paused := p.Probe(ctx, "c1", tt.policy)
			if ok != tt.ok || !strings.Contains(detail, tt.detail) || paused != (tt.exec == pausedExec) {
				t.Fatalf("Probe = %v %q paused %v, want %v with %q", ok, detail, paused, tt.ok, tt.detail)
			}
			if tt.policy.Type != slacklinev1.HealthCheck_TYPE_COMMAND {
				if got := <-dial.ports; got != tt.policy.Port {
					t.Fatalf("dialled port %d, want %d", got, tt.policy.Port)
				}
			}
		})
	}
}

// TestProbesSkipPausedTasks: a task whose container is frozen gets no check
// of any type (an HTTP check would time out and count as a failure, killing
// a task for a pause that QoS undoes); a task that is not is checked.
func TestProbesSkipPausedTasks(t *testing.T) {
	t.Parallel()
	for _, typ := range []slacklinev1.HealthCheck_Type{slacklinev1.HealthCheck_TYPE_HTTP, slacklinev1.HealthCheck_TYPE_TCP, slacklinev1.HealthCheck_TYPE_COMMAND} {
		t.Run(typ.String(), func(t *testing.T) {
			t.Parallel()
			dial := loopback{ports: make(chan uint16, 4)}
			p := NewProbes(dial, exitCode(0))
			p.SetPaused(func(id string) bool { return id == "frozen" })
			policy := Policy{Type: typ, Port: 1, Path: "/", Scheme: "http"}
			ok, detail, paused := p.Probe(t.Context(), "frozen", policy)
			if ok || !paused || !strings.Contains(detail, "paused") {
				t.Fatalf("frozen task: Probe = %v %q paused %v, want skipped as paused", ok, detail, paused)
			}
			if len(dial.ports) != 0 {
				t.Fatalf("frozen task: a %v check dialled port %d", typ, <-dial.ports)
			}
			if typ == slacklinev1.HealthCheck_TYPE_COMMAND {
				if ok, detail, paused := p.Probe(t.Context(), "running", policy); !ok || paused {
					t.Fatalf("running task: Probe = %v %q paused %v, want ok", ok, detail, paused)
				}
			}
		})
	}
}
