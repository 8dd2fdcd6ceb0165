package e2e

import (
	"bufio"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"connectrpc.com/connect"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"go.yaml.in/yaml/v3"

	"github.com/slackline/slackline/deploy"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/privileged"
)

// TestLiveView drives the coordinator's /ui/ page in headless Chromium
// against a real coordinator, agent and frameworks: the page lists the
// agent by hostname, shows its running tasks and what bounds its memory
// slack, draws CPU points that change over time, and puts the QoS
// correction the test provokes (as TestQoSInterference does) on the node's
// timeline. On the same cluster it
// then checks that every metric the Grafana dashboard and the Prometheus
// rules name is on the coordinator's or the agent's /metrics.
func TestLiveView(t *testing.T) {
	privileged.Require(t)
	chrome := chromium(t)
	addr, _, _ := startCoordinator(t)
	agent := startAgent(t, addr, "live-node", "cpus:2;mem:2048", "--monitor-interval", "100ms",
		"--oversubscribed-resources-interval", "200ms", "--estimator-window", "5s", "--qos-controller", "interference",
		"--qos-kill-after", "10m", "--qos-min-attributed-delay", "0")
	waitAgentsActive(t, addr, 1)
	// Before any task, offer or QoS correction: counters that only an
	// event would create must be exported already, at 0 (per-container
	// series aside: no container exists yet).
	t.Run("dashboard and rules name exported metrics before any event", func(t *testing.T) {
		checkNamedMetricsExported(t, addr, agent.listen, false)
	})
	agentID := ""
	if state, err := getState(t, operator(addr)); err == nil && len(state.GetAgents()) == 1 {
		agentID = state.GetAgents()[0].GetId()
	}
	dir := taskVisibleDir(t)
	busy, calm := filepath.Join(dir, "busy"), filepath.Join(dir, "calm")
	// Idle (slack to offer) until busy exists, then CPU-bound beyond its
	// two CPUs (run-queue latency rises) until calm exists.
	guaranteed := fmt.Sprintf(`while [ ! -f %[1]s ]; do sleep 0.1; done; for i in 1 2 3 4; do (while [ ! -f %[2]s ]; do :; done) & done; wait; sleep 1000`, busy, calm)
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "guaranteed", "--tasks", "1",
		"--task-resources", "cpus:2;mem:64", "--command", guaranteed)
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "hogs", "--revocable", "--tasks", "2",
		"--max-attempts", "1", "--task-resources", "cpus:0.3;mem:32", "--command", "while :; do :; done")
	t.Cleanup(func() { _ = os.WriteFile(calm, nil, 0o644) })
	eventually(t, 60*time.Second, func() string {
		if n := len(revocableTasks(t, addr, "hogs")[slacklinev1.TaskState_TASK_STATE_RUNNING]); n != 2 {
			return fmt.Sprintf("%d revocable hogs running", n)
		}
		return ""
	})

	ctx := browser(t, chrome)
	run := func(what string, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		stepCtx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := chromedp.Do(stepCtx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	page := "http://" + addr + "/ui/"
	run("the cluster view lists the agent by hostname", 30*time.Second,
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS(`#agents tr[data-hostname="live-node"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#tasks tr[data-state="TASK_STATE_RUNNING"]`)))

	run("the hostname opens the node view with the running tasks", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#agents tr[data-hostname="live-node"] a.hostname`)),
		chromedp.WaitVisible(chromedp.CSS(`#containers section.container[data-revocable="false"][data-state="TASK_STATE_RUNNING"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#containers section.container[data-revocable="true"][data-state="TASK_STATE_RUNNING"]`)))
	hash, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.hash`))
	if err != nil {
		t.Fatal(err)
	}
	if agentID != "" && hash != "#/agents/"+agentID {
		t.Fatalf("node view at %q, want #/agents/%s", hash, agentID)
	}
	// What bounds the memory slack (#28): the bound that set the revocable
	// mem estimate, with the node's terms (kept free, other use).
	run("the node view names the bound of the memory slack", 30*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`#memory-bound[data-limited-by]`)))
	memoryBound, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => { const p = document.querySelector("#memory-bound"); return [p.dataset.limitedBy, p.textContent]; })()`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains([]string{"allocations", "total", "node"}, memoryBound[0]) || !strings.Contains(memoryBound[1], "kept free for QoS") {
		t.Errorf("memory bound shown as %q: %q; want the bound that set it and the node's terms", memoryBound[0], memoryBound[1])
	}

	// History: the agent kept the hogs' series before the page opened, so
	// the page shows them at once (the chart's first point is older than
	// the page), with memory and network beside CPU and run-queue latency,
	// and again right after a reload.
	opened := historySpan(t, agent, 15*time.Second)
	hog := `#containers section.container[data-revocable="true"]`
	historyShown := func(before float64) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](fmt.Sprintf(`(() => {
			const card = document.querySelector(%q);
			if (!card) return false;
			const f = (m) => card.querySelector('figure[data-metric="' + m + '"]');
			const ok = (m) => f(m) && Number(f(m).dataset.points) >= 10 && Number(f(m).dataset.first) < %f;
			return ["cpu", "memory", "network", "runqueue-p99"].every(ok) && f("cpu").querySelector("canvas") !== null;
		})()`, hog, before-10), chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(100*time.Millisecond))
	}
	run("the node view shows the history kept before the page opened", 40*time.Second, historyShown(opened))
	run("hovering a chart shows its time and value", 20*time.Second, hover(hog+` figure[data-metric="cpu"]`))
	reloaded := float64(time.Now().UnixMilli()) / 1e3
	run("after a reload the history is there again", 40*time.Second, chromedp.Reload(), historyShown(reloaded))

	// Provoke interference: the guaranteed task turns CPU-bound; the
	// interference controller throttles the revocable subtree, and the
	// who-delayed-whom table names the revocable hogs as the guaranteed
	// task's culprits.
	if err := os.WriteFile(busy, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run("a THROTTLE correction appears on the QoS timeline", 60*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`#qos-timeline g.correction[data-kind="CORRECTION_KIND_THROTTLE"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#qos tr[data-kind="CORRECTION_KIND_THROTTLE"]`)))
	run("who delayed whom names a revocable hog as the guaranteed task's culprit", 60*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`#delays tr[data-culprit-kind="revocable"][data-victim^="guaranteed"]`)))
	screenshot(t, ctx, "liveview-node.png")
	if err := os.WriteFile(calm, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// Tables sort (naturally, both ways) and filter; a task's output is one
	// click away.
	run("the cluster view again", 30*time.Second, chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS(`#tasks tr[data-state="TASK_STATE_RUNNING"]`)))
	for _, dir := range []string{"asc", "desc"} {
		run("sort the live tasks by name, "+dir, 20*time.Second,
			chromedp.Click(chromedp.CSS(`#tasks th:first-child`)),
			chromedp.WaitVisible(chromedp.CSS(`#tasks th:first-child[data-sort="`+dir+`"]`)))
		names, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#tasks tbody tr td:first-child")].map((td) => td.textContent)`))
		if err != nil {
			t.Fatal(err)
		}
		want := slices.Clone(names)
		slices.SortStableFunc(want, naturalCompare)
		if dir == "desc" {
			slices.Reverse(want)
		}
		if len(names) < 3 || !slices.Equal(names, want) {
			t.Fatalf("live tasks sorted %s by name: %q, want %q", dir, names, want)
		}
	}
	run("filter the live tasks", 20*time.Second,
		chromedp.SendKeys(chromedp.CSS(`#tasks input.filter`), "hogs"),
		chromedp.Poll[chromedp.Void](`document.querySelector("#tasks").dataset.rows === "2"`, chromedp.WithPollingTimeout(15*time.Second)))
	screenshot(t, ctx, "liveview-cluster.png")
	run("a hog's stdout and stderr one click away", 30*time.Second,
		chromedp.Click(chromedp.CSS(`#tasks tbody tr a.logs`)),
		chromedp.WaitVisible(chromedp.CSS(`#stdout pre`)), chromedp.WaitVisible(chromedp.CSS(`#stderr pre`)))

	t.Run("dashboard and rules name exported metrics", func(t *testing.T) {
		checkNamedMetricsExported(t, addr, agent.listen, true)
	})

	t.Run("manifests use flags the binaries have", func(t *testing.T) {
		for binary, args := range manifestArgs(t) {
			known := binaryFlags(t, binary)
			for _, a := range args {
				name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
				if strings.HasPrefix(a, "-") && !known[name] {
					t.Errorf("deploy/kubernetes runs %s with --%s, which it does not define", binary, name)
				}
			}
		}
	})
}

// chromium finds Debian's Chromium, or skips (fails under
// SLACKLINE_TEST_PRIVILEGED=1, as in CI, which installs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(privileged.EnvVar) == "1" {
		t.Fatalf("no chromium found and %s=1 forbids skipping (apt-get install chromium)", privileged.EnvVar)
	}
	t.Skip("no chromium found (apt-get install chromium)")
	return ""
}

// browser starts headless Chromium; when the test fails it saves a
// screenshot and the page's DOM as artifacts and names where they are.
func browser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1300, 1100),
		// This machine's network is closed: no background connections.
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 4*time.Minute)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			saveArtifacts(t, ctx)
		}
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
	})
	return ctx
}

func saveArtifacts(t *testing.T, ctx context.Context) {
	dir := artifactDir(t)
	shotCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(shotCtx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("no screenshot: %v", err)
		return
	}
	dom, _ := chromedp.Run(shotCtx, chromedp.OuterHTML(chromedp.CSS("html")))
	shot, page := filepath.Join(dir, "liveview.png"), filepath.Join(dir, "liveview.html")
	if err := os.WriteFile(shot, png, 0o644); err == nil {
		_ = os.WriteFile(page, []byte(dom), 0o644)
		t.Logf("screenshot of the page when the test failed: %s (DOM: %s)", shot, page)
	}
}

// artifactDir is t.ArtifactDir when go test runs with -artifacts (kept
// under -outputdir), else a directory that outlives the test run.
func artifactDir(t *testing.T) string {
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		return t.ArtifactDir()
	}
	dir := filepath.Join(os.TempDir(), "slackline-e2e-artifacts", strings.ReplaceAll(t.Name(), "/", "_")+"-"+time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("artifact directory: %v", err)
	}
	return dir
}

// historySpan waits until the agent's history holds span of every
// container's series, and returns the time then (Unix seconds).
func historySpan(t *testing.T, agent *realAgent, span time.Duration) float64 {
	t.Helper()
	eventually(t, span+60*time.Second, func() string {
		resp, err := agent.node().GetHistory(context.Background(), connect.NewRequest(&slacklinev1.GetHistoryRequest{}))
		if err != nil {
			return err.Error()
		}
		if len(resp.Msg.GetSeries()) < 3 {
			return fmt.Sprintf("%d series in the history", len(resp.Msg.GetSeries()))
		}
		for _, s := range resp.Msg.GetSeries() {
			times := s.GetTimes()
			if len(times) < 2 || times[len(times)-1]-times[0] < span.Seconds() {
				return fmt.Sprintf("%s: %d points", s.GetTaskId(), len(times))
			}
		}
		return ""
	})
	return float64(time.Now().UnixMilli()) / 1e3
}

// hover moves the mouse over a chart's plot and waits for its legend to
// show the time and a value under the cursor (without a cursor it shows
// "–").
func hover(figure string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		// Scrolled to and measured in one script: the view redraws its
		// charts every second, and a node looked up by the protocol
		// (chromedp.ScrollIntoView) was gone by the time it was scrolled
		// to ("Could not find node with given id").
		box, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](fmt.Sprintf(
			`(() => { const p = document.querySelector(%q).querySelector(".u-over"); p.scrollIntoView({block: "center"}); const r = p.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()`, figure)))
		if err != nil {
			return fmt.Errorf("scroll to the plot: %w", err)
		}
		if err := chromedp.Do(ctx, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, box[0]+box[2]*0.8, box[1]+box[3]/2)); err != nil {
			return err
		}
		return chromedp.Do(ctx, chromedp.Poll[chromedp.Void](fmt.Sprintf(`(() => {
			const v = [...document.querySelector(%q).querySelectorAll(".u-legend .u-series .u-value")].map((e) => e.textContent);
			return v.length === 2 && /\d:\d\d/.test(v[0]) && /^[\d.]+$/.test(v[1]);
		})()`, figure), chromedp.WithPollingTimeout(15*time.Second)))
	})
}

// screenshot saves the page as docs/images/NAME when
// SLACKLINE_UI_SCREENSHOTS is set (scripts/ui-screenshots.sh).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("SLACKLINE_UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	shotCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(shotCtx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", filepath.Join(dir, name))
}

// naturalCompare orders strings as the page does: runs of digits by
// value (hogs-2 before hogs-10), the rest case-insensitively.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			x, _ := strconv.ParseUint(a[:da], 10, 64)
			y, _ := strconv.ParseUint(b[:db], 10, 64)
			if c := cmp.Compare(x, y); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if c := cmp.Compare(unicode.ToLower(rune(a[0])), unicode.ToLower(rune(b[0]))); c != 0 {
			return c
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func digits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// metricFamilies returns the metric families a /metrics page declares.
func metricFamilies(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	out := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = true
		}
	}
	if len(out) == 0 {
		t.Fatalf("GET %s: no metric families", url)
	}
	return out
}

// manifestArgs returns the arguments each Slackline binary is started with
// in deploy/kubernetes (after an nsenter prefix, if any).
func manifestArgs(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	// The HA overlay's patch names no command: its args are the
	// coordinator's (the StatefulSet it patches).
	for _, file := range []string{"kubernetes/coordinator.yaml", "kubernetes/agent.yaml", "kubernetes-ha/coordinator-ha.yaml"} {
		raw, err := readDeployFile(file)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(raw)))
		for {
			var doc struct {
				Spec struct {
					Template struct {
						Spec struct {
							Containers []struct {
								Command, Args []string
							} `yaml:"containers"`
						} `yaml:"spec"`
					} `yaml:"template"`
				} `yaml:"spec"`
			}
			if err := dec.Decode(&doc); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			for _, c := range doc.Spec.Template.Spec.Containers {
				cmd := c.Command
				if i := slices.Index(cmd, "--"); i >= 0 {
					cmd = cmd[i+1:]
				}
				if len(cmd) == 0 && strings.HasPrefix(file, "kubernetes-ha/") {
					cmd = []string{"slackline-coordinator"}
				}
				if len(cmd) > 0 {
					out[cmd[0]] = append(out[cmd[0]], append(cmd[1:], c.Args...)...)
				}
			}
		}
	}
	if len(out) != 2 {
		t.Fatalf("found the commands %v in the manifests, want the coordinator's and the agent's", out)
	}
	return out
}

func readDeployFile(name string) ([]byte, error) {
	f, err := deploy.Files().Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

var flagLine = regexp.MustCompile(`(?m)^\s+-([a-z0-9-]+)`)

// binaryFlags returns the flags a built binary's -h lists.
func binaryFlags(t *testing.T, binary string) map[string]bool {
	t.Helper()
	out, _ := exec.Command(filepath.Join(binDir, binary), "-h").CombinedOutput()
	flags := map[string]bool{}
	for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if len(flags) < 3 {
		t.Fatalf("%s -h listed no flags:\n%s", binary, out)
	}
	return flags
}

// TestLiveViewToken: with authorization on, the page asks for an operator
// token, sends the one typed into its token field on every call, keeps it
// across reloads of the tab, and forgets it on request. It needs no root:
// the cluster view of a coordinator without agents is enough.
func TestLiveViewToken(t *testing.T) {
	chrome := chromium(t)
	creds := t.TempDir()
	if out, err := exec.Command(filepath.Join(binDir, "slacklinectl"), "credentials", "init", creds, "--operators", "admin").CombinedOutput(); err != nil {
		t.Fatalf("slacklinectl credentials init: %v\n%s", err, out)
	}
	token, err := os.ReadFile(filepath.Join(creds, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	start(t, "slackline-coordinator", append(coordinatorArgs(addr, t.TempDir()), "--authz", filepath.Join(creds, "authz.yaml"))...)
	eventually(t, startTimeout, func() string {
		resp, err := http.Get("http://" + addr + "/ui/")
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		return ""
	})

	ctx := browser(t, chrome)
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		stepCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(stepCtx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	statusSays := func(text string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			for {
				got, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS("#status")))
				if err == nil && strings.Contains(got, text) {
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("status %q never said %q", got, text)
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	step("without a token the page asks for one",
		chromedp.Navigate("http://"+addr+"/ui/"), statusSays("operator token"))
	step("with the token it shows the cluster",
		chromedp.SendKeys(chromedp.CSS("#token"), strings.TrimSpace(string(token))),
		chromedp.Click(chromedp.CSS(`#token-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#agents")), statusSays("0 agents"))
	step("the tab keeps the token across a reload",
		chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#agents")), statusSays("0 agents"))
	step("Forget drops it",
		chromedp.Click(chromedp.CSS("#token-clear")), statusSays("operator token"))
}

// checkNamedMetricsExported checks that every metric the Grafana dashboard
// and the Prometheus rules name is on the coordinator's or the agent's
// /metrics (the etcd-only ones and recording rules' outputs aside; the
// per-container ones only when containers is set).
func checkNamedMetricsExported(t *testing.T, addr, agentListen string, containers bool) {
	t.Helper()
	families := map[string]bool{}
	for _, url := range []string{"http://" + addr + "/metrics", "http://" + agentListen + "/metrics"} {
		for name := range metricFamilies(t, url) {
			families[name] = true
		}
	}
	dash, err := deploy.DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	rules, recorded, err := deploy.RuleQueries()
	if err != nil {
		t.Fatal(err)
	}
	generated := map[string]bool{"up": true} // Prometheus's own
	// Exported only by coordinators on etcd and etcd (TestHAFailover
	// checks them there).
	for _, n := range slices.Concat(deploy.HAMetrics.Coordinator, deploy.HAMetrics.Etcd) {
		generated[n] = true
	}
	for _, r := range recorded {
		generated[r] = true
	}
	checked := 0
	for _, q := range append(dash, rules...) {
		names, err := deploy.MetricNames(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
			continue
		}
		for _, n := range names {
			if !containers && (strings.HasPrefix(n, "slackline_container_") || strings.HasPrefix(n, "container_")) {
				continue
			}
			checked++
			if !generated[n] && !deploy.Exported(n, families) {
				t.Errorf("%s names %s, which neither the coordinator nor the agent exports", q.Where, n)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked only %d metric names", checked)
	}
}
