package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/internal/taskstate"
	"github.com/slackline/slackline/resources"
)

// runTasks launches tasks on the one agent of a fresh cluster and returns
// every status update of each task, in order, once all of them ended.
// afterLaunch, when set, runs on a goroutine of its own once they were
// launched.
func runTasks(t *testing.T, agentName string, infos func(o *slacklinev1.Offer) []*slacklinev1.TaskInfo, timeout time.Duration,
	afterLaunch func(ctx context.Context, c *frameworkapi.Client, agentID string), agentFlags ...string) map[string][]*slacklinev1.TaskStatus {
	t.Helper()
	addr, _, _ := startCoordinator(t)
	startAgent(t, addr, agentName, "cpus:4;mem:2048", agentFlags...)
	waitAgentsActive(t, addr, 1)
	var mu sync.Mutex
	updates := map[string][]*slacklinev1.TaskStatus{}
	launched := 0
	ended := map[string]bool{}
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fw, err := frameworkapi.New(frameworkapi.Config{Coordinator: "http://" + addr,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Framework: &slacklinev1.FrameworkInfo{Name: agentName}})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	go fw.Run(ctx, frameworkapi.HandlerFuncs{
		OffersFunc: func(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
			for _, o := range offers {
				first := false
				once.Do(func() { first = true })
				if !first {
					_ = c.Decline(ctx, []string{o.GetId()}, frameworkapi.Filters(3600))
					continue
				}
				tasks := infos(o)
				mu.Lock()
				launched = len(tasks)
				mu.Unlock()
				if err := c.Launch(ctx, []string{o.GetId()}, tasks, nil); err != nil {
					t.Errorf("launch: %v", err)
				}
				if afterLaunch != nil {
					go afterLaunch(ctx, c, o.GetAgentId())
				}
			}
		},
		UpdateFunc: func(_ context.Context, _ *frameworkapi.Client, st *slacklinev1.TaskStatus) {
			mu.Lock()
			defer mu.Unlock()
			updates[st.GetTaskId()] = append(updates[st.GetTaskId()], st)
			if taskstate.IsTerminal(st.GetState()) {
				ended[st.GetTaskId()] = true
				if len(ended) == launched {
					close(done)
				}
			}
		},
	})
	select {
	case <-done:
	case <-time.After(timeout):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("tasks did not all end within %v: %v", timeout, summarize(updates))
	}
	mu.Lock()
	defer mu.Unlock()
	return updates
}

// summarize renders each task's updates as "STATE[healthy] REASON", in order.
func summarize(updates map[string][]*slacklinev1.TaskStatus) map[string]string {
	out := map[string]string{}
	for id, list := range updates {
		var parts []string
		for _, st := range list {
			s := strings.TrimPrefix(st.GetState().String(), "TASK_STATE_")
			if st.Healthy != nil {
				s += fmt.Sprintf("[healthy=%v]", st.GetHealthy())
			}
			if st.GetReason() != slacklinev1.Reason_REASON_UNSPECIFIED {
				s += " " + strings.TrimPrefix(st.GetReason().String(), "REASON_")
			}
			parts = append(parts, s)
		}
		out[id] = strings.Join(parts, ", ")
	}
	return out
}

func tgz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestFetchedArtifacts runs tasks on a real agent that use artifacts served
// by a local HTTP server: a tarball (verified and cached: two tasks, one
// download) and a plain executable run from the sandbox; a wrong sha256 and
// an unreachable URL fail their tasks with REASON_FETCH_FAILED naming the
// URL.
func TestFetchedArtifacts(t *testing.T) {
	privileged.Require(t)
	archive := tgz(t, map[string]string{"bin/hello": "#!/bin/sh\necho hello-from-artifact\n"})
	tool := []byte("#!/bin/sh\nexit 0\n")
	var archiveDownloads atomic.Int64
	hanging := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hangs":
			// Never answers: the task is killed while its fetch waits.
			hanging <- struct{}{}
			<-r.Context().Done()
		case "/app.tar.gz":
			archiveDownloads.Add(1)
			_, _ = w.Write(archive)
		case "/tool":
			_, _ = w.Write(tool)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	closed := "http://" + freeAddr(t) + "/gone.tar.gz"
	cachedArchive := &slacklinev1.CommandInfo_URI{Value: srv.URL + "/app.tar.gz", Sha256: sha(archive), Extract: "tar.gz", Cache: true}
	uses := `test "$(./bin/hello)" = hello-from-artifact && ./tool && test "$(stat -c %u bin/hello)" = "$(id -u)"`
	updates := runTasks(t, "fetch", func(o *slacklinev1.Offer) []*slacklinev1.TaskInfo {
		task := func(id string, uris ...*slacklinev1.CommandInfo_URI) *slacklinev1.TaskInfo {
			return frameworkapi.NewTask(id, id, o, resources.MustParse("cpus:0.1;mem:32"),
				&slacklinev1.CommandInfo{Value: uses, Shell: true, Uris: uris})
		}
		return []*slacklinev1.TaskInfo{
			task("first", cachedArchive, &slacklinev1.CommandInfo_URI{Value: srv.URL + "/tool", Executable: true}),
			task("second", cachedArchive, &slacklinev1.CommandInfo_URI{Value: srv.URL + "/tool", Executable: true, Sha256: sha(tool)}),
			task("bad-sum", &slacklinev1.CommandInfo_URI{Value: srv.URL + "/tool", Sha256: sha([]byte("not the tool"))}),
			task("unreachable", &slacklinev1.CommandInfo_URI{Value: closed, Extract: "tar.gz"}),
			task("killed-while-fetching", &slacklinev1.CommandInfo_URI{Value: srv.URL + "/hangs"}),
		}
	}, 2*time.Minute, func(ctx context.Context, c *frameworkapi.Client, agentID string) {
		select {
		case <-hanging:
		case <-ctx.Done():
			return
		}
		if err := c.Kill(ctx, "killed-while-fetching", agentID); err != nil {
			t.Errorf("kill: %v", err)
		}
	}, "--fetch-timeout", "5m")
	summary := summarize(updates)
	for _, id := range []string{"first", "second"} {
		if got := summary[id]; !strings.HasSuffix(got, "FINISHED") {
			t.Errorf("task %s: %s, want it FINISHED", id, got)
		}
	}
	for id, url := range map[string]string{"bad-sum": srv.URL + "/tool", "unreachable": closed} {
		list := updates[id]
		last := list[len(list)-1]
		if last.GetState() != slacklinev1.TaskState_TASK_STATE_FAILED || last.GetReason() != slacklinev1.Reason_REASON_FETCH_FAILED ||
			!strings.Contains(last.GetMessage(), url) {
			t.Errorf("task %s: %v %v %q; want FAILED, REASON_FETCH_FAILED, naming %s", id, last.GetState(), last.GetReason(), last.GetMessage(), url)
		}
	}
	if !strings.Contains(updates["bad-sum"][0].GetMessage(), "sha256 mismatch") {
		t.Errorf("bad-sum: %q, want it to say sha256 mismatch", updates["bad-sum"][0].GetMessage())
	}
	// The kill does not wait for the download (--fetch-timeout 5m would
	// outlast the test).
	if got := summary["killed-while-fetching"]; got != "KILLED TASK_KILLED_DURING_LAUNCH" {
		t.Errorf("killed-while-fetching: %s, want KILLED TASK_KILLED_DURING_LAUNCH", got)
	}
	if got := archiveDownloads.Load(); got != 1 {
		t.Errorf("the cached archive was downloaded %d times for two tasks, want 1", got)
	}
}

// httpServerThatHangs answers its first two requests with 200, then stops
// answering (its only thread sleeps): a hung server.
const httpServerThatHangs = `import http.server, time
n = 0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global n
        n += 1
        if n > 2:
            time.sleep(3600)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", PORT), H).serve_forever()
`

// tcpServerThatCloses accepts two connections, then closes its listening
// socket and lives on.
const tcpServerThatCloses = `import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", PORT))
s.listen(16)
for _ in range(2):
    c, _ = s.accept()
    c.close()
s.close()
time.sleep(3600)
`

// TestHealthChecks runs tasks with health checks on a real agent: an HTTP
// server that stops answering, a TCP server that stops listening, and a
// COMMAND check that sees (and removes, as the task's user) a file in the
// task's private /tmp: each is reported healthy, then unhealthy, then
// killed, ending FAILED with REASON_TASK_HEALTH_CHECK_STATUS_FAILED.
func TestHealthChecks(t *testing.T) {
	privileged.Require(t)
	port := func() uint32 {
		_, p, _ := net.SplitHostPort(freeAddr(t))
		var n uint32
		fmt.Sscan(p, &n)
		return n
	}
	httpPort, tcpPort := port(), port()
	marker := fmt.Sprintf("/tmp/ready-%d", time.Now().UnixNano())
	timing := func(hc *slacklinev1.HealthCheck) *slacklinev1.HealthCheck {
		// The first success ends the grace period; failures before it
		// (the server still starting) do not count.
		hc.DelaySeconds, hc.IntervalSeconds, hc.TimeoutSeconds = proto.Float64(0), proto.Float64(1), proto.Float64(2)
		hc.GracePeriodSeconds, hc.ConsecutiveFailures = proto.Float64(120), proto.Uint32(2)
		return hc
	}
	updates := runTasks(t, "health", func(o *slacklinev1.Offer) []*slacklinev1.TaskInfo {
		task := func(id, command string, hc *slacklinev1.HealthCheck) *slacklinev1.TaskInfo {
			info := frameworkapi.NewTask(id, id, o, resources.MustParse("cpus:0.1;mem:64"),
				&slacklinev1.CommandInfo{Value: command, Shell: true})
			info.HealthCheck = timing(hc)
			return info
		}
		python := func(script string, port uint32) string {
			return "exec /usr/bin/python3 -c '" + strings.ReplaceAll(script, "PORT", fmt.Sprint(port)) + "'"
		}
		return []*slacklinev1.TaskInfo{
			task("http", python(httpServerThatHangs, httpPort), &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_HTTP,
				Http: &slacklinev1.HealthCheck_HTTPCheck{Port: httpPort, Path: "/health"}}),
			task("tcp", python(tcpServerThatCloses, tcpPort), &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_TCP,
				Tcp: &slacklinev1.HealthCheck_TCPCheck{Port: tcpPort}}),
			// The marker is in the task's private /tmp: a check run on
			// the host would never find it. rm succeeds only for its
			// owner (/tmp is sticky): the check runs as the task's user.
			task("command", "echo ok > "+marker+" && exec sleep 3600", &slacklinev1.HealthCheck{Type: slacklinev1.HealthCheck_TYPE_COMMAND,
				Command: &slacklinev1.CommandInfo{Value: "test -f " + marker + " && rm " + marker, Shell: true}}),
		}
	}, 3*time.Minute, nil)
	// The updates that carry health, in order. (The first RUNNING, which
	// carries none, is not asserted: a framework does not always see it,
	// see TestFetchedArtifacts.)
	want := "RUNNING[healthy=true], RUNNING[healthy=false], FAILED[healthy=false] TASK_HEALTH_CHECK_STATUS_FAILED"
	for id, list := range updates {
		var checked []*slacklinev1.TaskStatus
		for _, st := range list {
			if st.Healthy != nil || taskstate.IsTerminal(st.GetState()) {
				checked = append(checked, st)
			}
		}
		if got := summarize(map[string][]*slacklinev1.TaskStatus{id: checked})[id]; got != want {
			t.Errorf("task %s: %s\nwant %s\n(all updates: %s)", id, got, want, summarize(updates)[id])
		}
	}
	if len(updates) != 3 {
		t.Errorf("updates of %d tasks, want 3", len(updates))
	}
}
