// Command images measures task launch latency with images (run as root),
// side by side in one run: from Accept to the framework receiving
// TASK_STATE_RUNNING for a plain command task, a task of a cached image,
// and a task of an image pulled cold (a busybox-static layer plus
// --cold-mib of incompressible data, a new image each time) from Debian's
// docker-registry on loopback. Plain and cached launches alternate, one at
// a time. It also breaks each launch into the stages the agent and its
// containerizer log, in the order they happen (see stageRows), and what is
// left outside the agent (the coordinator's Accept, RunTask to the agent,
// the RUNNING update back to the framework). It builds and starts the real
// coordinator and agent. With --hogs N, N guaranteed tasks of one cpu
// each spin beside every launch.
//
//	sudo go run ./scripts/bench/images --trials 50 --cold 5
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/benchutil"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/resources"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench images:", err)
		os.Exit(1)
	}
}

func run() error {
	trials := flag.Int("trials", 50, "plain and cached-image tasks launched (each), alternating, one at a time")
	cold := flag.Int("cold", 5, "tasks of images pulled cold, each a new image")
	coldMiB := flag.Int("cold-mib", 48, "MiB of incompressible data in each cold image, besides busybox (about 1 MiB)")
	hogs := flag.Int("hogs", 0, "guaranteed tasks of one cpu each spinning in a busy loop, launched first and running throughout, so that every launch competes for the CPU inside the agent's cgroup root with tasks at a task's weight")
	flag.Parse()
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root (the agent creates cgroups)")
	}
	dir, err := os.MkdirTemp("", "slackline-bench-images")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := benchutil.Build(dir, "./cmd/slackline-coordinator", "./cmd/slackline-agent", "./cmd/slackline-supervisor"); err != nil {
		return err
	}
	regAddr, coordAddr, agentAddr := benchutil.FreeAddr(), benchutil.FreeAddr(), benchutil.FreeAddr()
	registry, err := startRegistry(dir, regAddr)
	if err != nil {
		return err
	}
	defer registry.Process.Kill()

	busybox, err := busyboxLayer()
	if err != nil {
		return err
	}
	cached, err := push(regAddr, "bench/cached:v1", busybox, layer(map[string][]byte{"data": []byte("cached\n")}))
	if err != nil {
		return err
	}
	var colds []string
	for i := range *cold {
		data := make([]byte, *coldMiB<<20)
		rng := rand.NewChaCha8([32]byte{byte(i), byte(time.Now().UnixNano())})
		_, _ = rng.Read(data)
		ref, err := push(regAddr, fmt.Sprintf("bench/cold-%d:v1", i), busybox, layer(map[string][]byte{"blob": data}))
		if err != nil {
			return err
		}
		colds = append(colds, ref)
	}

	root := fmt.Sprintf("slackline-bench-images-%d", os.Getpid())
	stages := &stageLog{}
	coord := exec.Command(filepath.Join(dir, "slackline-coordinator"), "--listen", coordAddr, "--work-dir", filepath.Join(dir, "coord"),
		"--log-level", "warn", "--insecure") // a loopback cluster of the benchmark's own, no credentials
	agent := exec.Command(filepath.Join(dir, "slackline-agent"), "--coordinator", "http://"+coordAddr, "--listen", agentAddr,
		"--work-dir", filepath.Join(dir, "agent"), "--cgroup-root", root, "--resources", "cpus:64;mem:65536", "--log-level", "info",
		"--kill-grace-period", "100ms", "--insecure", "--ebpf=false")
	coord.Stderr, agent.Stderr = os.Stderr, stages
	for _, p := range []*exec.Cmd{coord, agent} {
		p.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := p.Start(); err != nil {
			return err
		}
		defer p.Process.Kill()
	}
	defer cgrouptest.RemoveRoot(root) // tasks outlive their agent by design

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	offers := make(chan *slacklinev1.Offer, 100)
	updates := make(chan *slacklinev1.TaskStatus, 1000)
	handler := frameworkapi.HandlerFuncs{
		OffersFunc: func(ctx context.Context, c *frameworkapi.Client, os []*slacklinev1.Offer) {
			for _, o := range os {
				offers <- o
			}
		},
		UpdateFunc: func(ctx context.Context, c *frameworkapi.Client, st *slacklinev1.TaskStatus) { updates <- st },
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	fw, err := frameworkapi.New(frameworkapi.Config{Coordinator: "http://" + coordAddr, Logger: quiet,
		Framework: &slacklinev1.FrameworkInfo{Name: "bench-images"}})
	if err != nil {
		return err
	}
	go fw.Run(ctx, handler)

	need := resources.MustParse("cpus:0.01;mem:16")
	n := 0
	var lastTask string
	command := "sleep 3600"
	launch := func(image string) (time.Duration, error) {
		n++
		o := <-offers
		lastTask = fmt.Sprintf("t%d", n)
		task := frameworkapi.NewTask(lastTask, "bench", o, need, &slacklinev1.CommandInfo{Value: command, Shell: true})
		task.Image = image
		t0 := time.Now()
		if err := fw.Launch(ctx, []string{o.GetId()}, []*slacklinev1.TaskInfo{task}, frameworkapi.Filters(0)); err != nil {
			return 0, err
		}
		for {
			select {
			case st := <-updates:
				if st.GetTaskId() != task.GetTaskId() {
					continue
				}
				switch st.GetState() {
				case slacklinev1.TaskState_TASK_STATE_RUNNING:
					return time.Since(t0), nil
				case slacklinev1.TaskState_TASK_STATE_STAGING, slacklinev1.TaskState_TASK_STATE_STARTING:
					continue
				}
				return 0, fmt.Errorf("task %s (image %q): %v %v %s", task.GetTaskId(), image, st.GetState(), st.GetReason(), st.GetMessage())
			case <-time.After(5 * time.Minute):
				return 0, fmt.Errorf("task %s (image %q) not running after 5 minutes", task.GetTaskId(), image)
			}
		}
	}
	if *hogs > 0 {
		need, command = resources.MustParse("cpus:1;mem:16"), "while :; do :; done"
		for range *hogs {
			if _, err := launch(""); err != nil {
				return err
			}
		}
		need, command = resources.MustParse("cpus:0.01;mem:16"), "sleep 3600"
	}
	// The first of each kind warms up (the cached image's one pull, page cache).
	if _, err := launch(""); err != nil {
		return err
	}
	if _, err := launch(cached); err != nil {
		return err
	}
	var plain, withImage, pulled []time.Duration
	var plainTasks, imageTasks []string
	for range *trials {
		d, err := launch("")
		if err != nil {
			return err
		}
		plain, plainTasks = append(plain, d), append(plainTasks, lastTask)
		if d, err = launch(cached); err != nil {
			return err
		}
		withImage, imageTasks = append(withImage, d), append(imageTasks, lastTask)
	}
	for _, ref := range colds {
		d, err := launch(ref)
		if err != nil {
			return err
		}
		pulled = append(pulled, d)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("launch latency, Accept -> RUNNING received (load average %s; %d busy guaranteed tasks beside):\n", strings.Join(strings.Fields(string(load))[:3], " "), *hogs)
	report := func(what string, ds []time.Duration) {
		fmt.Printf("  %-44s n=%-3d p50 %-10v p99 %-10v max %v\n", what, len(ds), benchutil.Percentile(ds, 0.5, 10*time.Microsecond),
			benchutil.Percentile(ds, 0.99, 10*time.Microsecond), benchutil.Percentile(ds, 1, 10*time.Microsecond))
	}
	report("plain command", plain)
	report("cached image", withImage)
	report(fmt.Sprintf("cold pull (%d MiB image, loopback registry)", *coldMiB+1), pulled)
	fmt.Printf("  cached image - plain: p50 %+v, p99 %+v\n",
		benchutil.Percentile(withImage, 0.5, 10*time.Microsecond)-benchutil.Percentile(plain, 0.5, 10*time.Microsecond),
		benchutil.Percentile(withImage, 0.99, 10*time.Microsecond)-benchutil.Percentile(plain, 0.99, 10*time.Microsecond))
	// The agent logs its lines of a launch before the update reaches the
	// framework; the last one may still be in the pipe: give it a moment.
	time.Sleep(200 * time.Millisecond)
	fmt.Println("stages of the trials' launches, in order (ms; from the agent's logs, agent and supervisor clocks are the host's):")
	stages.report("plain", plainTasks, plain)
	stages.report("cached image", imageTasks, withImage)
	cancel()
	agent.Process.Kill()
	return nil
}

// stageRows are the stages of a launch the report lists, in the order
// they happen: the log line (by its msg) and field each comes from. The
// agent: the task record's checkpoint, then (image tasks) the image; the
// containerizer's Launch: the task's user (a dynamic one is leased), the
// rest of resolve, sandbox, its checkpoint, cgroups, the supervisor's start
// (the hand-off to a warm supervisor, or its fork and exec), the
// supervisor's setup, the shim's fork and exec (born in the task's
// cgroups), the shim's wait for the supervisor's word that it is in them
// (a move only on kernels before 5.7), isolating
// (namespaces, mounts, no_new_privs, seccomp), forking the task, the
// report back to Launch, the pids' checkpoint; the agent again: the checkpoint of the RUNNING update with
// the sandbox's record, and its hand-off to the session.
var stageRows = []struct{ msg, field, label string }{
	{lineAgent, "checkpoint_ms", "agent: task record checkpoint"},
	{lineAgent, "image_ms", "agent: image (acquire)"},
	{lineLaunched, "user_ms", "containerizer: task user"},
	{lineLaunched, "other_resolve_ms", "containerizer: environment, command"},
	{lineLaunched, "sandbox_ms", "containerizer: sandbox"},
	{lineLaunched, "container_checkpoint_ms", "containerizer: checkpoint"},
	{lineLaunched, "cgroups_ms", "containerizer: cgroups"},
	{lineLaunched, "other_prepare_ms", "containerizer: image dirs, fetch"},
	{lineLaunched, "spawn_ms", "supervisor: start (warm: hand-off)"},
	{lineLaunched, "setup_ms", "supervisor: setup"},
	{lineLaunched, "shim_exec_ms", "shim: fork+exec"},
	{lineLaunched, "join_ms", "shim: wait for its cgroups"},
	{lineLaunched, "isolate_ms", "shim: namespaces, mounts, seccomp"},
	{lineLaunched, "fork_ms", "shim: fork task, tell supervisor"},
	{lineLaunched, "report_ms", "supervisor: report to Launch"},
	{lineLaunched, "checkpoint_ms", "containerizer: pids checkpoint"},
	{lineRunning, "since_event_ms", "agent: RUNNING+sandbox checkpoint, send"},
}

// The agent's log lines the stages come from.
const (
	lineAgent    = "task launch stages"
	lineLaunched = "containerizer: launched"
	lineRunning  = "task running sent"
)

// stageLog collects the fields of the agent's lines of each launch, by
// task id and line (the first line of each kind per task).
type stageLog struct {
	mu      sync.Mutex
	partial []byte
	byTask  map[string]map[string]map[string]float64 // task -> msg -> field -> ms
}

func (s *stageLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(s.partial[:i])
		s.partial = s.partial[i+1:]
		msg := ""
		for _, m := range []string{lineAgent, lineLaunched, lineRunning} {
			if strings.Contains(line, `msg="`+m+`"`) {
				msg = m
			}
		}
		if msg == "" {
			if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				fmt.Fprintln(os.Stderr, line)
			}
			continue
		}
		fields := map[string]string{}
		for f := range strings.FieldsSeq(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				fields[k] = v
			}
		}
		task := fields["task"]
		if s.byTask == nil {
			s.byTask = map[string]map[string]map[string]float64{}
		}
		if s.byTask[task] == nil {
			s.byTask[task] = map[string]map[string]float64{}
		}
		if s.byTask[task][msg] != nil {
			continue // a later RUNNING (health) update
		}
		vals := map[string]float64{}
		for k, v := range fields {
			if strings.HasSuffix(k, "_ms") {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					vals[k] = f
				}
			}
		}
		if msg == lineLaunched {
			if fields["warm_supervisor"] == "true" {
				vals["warm"] = 1
			}
			vals["other_resolve_ms"] = vals["resolve_ms"] - vals["user_ms"]
			vals["other_prepare_ms"] = vals["prepare_ms"] - vals["sandbox_ms"] - vals["container_checkpoint_ms"] - vals["cgroups_ms"]
		}
		s.byTask[task][msg] = vals
	}
}

// report prints the p50 and p99 of each stage of tasks' launches, their
// sum (the agent's part), and what is left of each task's Accept ->
// RUNNING (totals, in the same order) outside the agent.
func (s *stageLog) report(label string, tasks []string, totals []time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pct := func(vs []float64, q float64) float64 {
		if len(vs) == 0 {
			return 0
		}
		vs = slices.Clone(vs)
		slices.Sort(vs)
		return vs[int(q*float64(len(vs)-1)+0.5)]
	}
	var agentSums, outside []float64
	for i, task := range tasks {
		lines := s.byTask[task]
		if lines == nil || lines[lineAgent] == nil || lines[lineLaunched] == nil || lines[lineRunning] == nil {
			continue
		}
		sum := 0.0
		for _, r := range stageRows {
			sum += lines[r.msg][r.field]
		}
		agentSums = append(agentSums, sum)
		outside = append(outside, float64(totals[i].Microseconds())/1000-sum)
	}
	warm := 0
	for _, task := range tasks {
		if s.byTask[task][lineLaunched]["warm"] == 1 {
			warm++
		}
	}
	fmt.Printf("  %s (%d of %d launches logged every stage; %d took a warm supervisor):\n", label, len(agentSums), len(tasks), warm)
	for _, r := range stageRows {
		var vs []float64
		for _, task := range tasks {
			if v, ok := s.byTask[task][r.msg][r.field]; ok {
				vs = append(vs, v)
			}
		}
		fmt.Printf("    %-40s p50 %7.2f  p99 %7.2f\n", r.label, pct(vs, 0.5), pct(vs, 0.99))
	}
	fmt.Printf("    %-40s p50 %7.2f  p99 %7.2f\n", "= the agent's part (sum)", pct(agentSums, 0.5), pct(agentSums, 0.99))
	fmt.Printf("    %-40s p50 %7.2f  p99 %7.2f\n", "outside the agent (Accept, RunTask, update)", pct(outside, 0.5), pct(outside, 0.99))
}

func startRegistry(dir, addr string) (*exec.Cmd, error) {
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		return nil, fmt.Errorf("docker-registry: %w (apt-get install docker-registry)", err)
	}
	config := fmt.Sprintf("version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "registry"), addr)
	if err := os.WriteFile(filepath.Join(dir, "registry.yml"), []byte(config), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "registry.yml"))
	// Its log (a 404 for each blob a push checks first) stays out of the report.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	for range 200 {
		if resp, err := http.Get("http://" + addr + "/v2/"); err == nil {
			resp.Body.Close()
			return cmd, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
	return nil, fmt.Errorf("docker-registry did not answer on %s", addr)
}

// busyboxLayer is the host's static busybox at /bin/busybox with its
// sh and sleep applets.
func busyboxLayer() (v1.Layer, error) {
	path, err := exec.LookPath("busybox")
	if err != nil {
		return nil, fmt.Errorf("busybox: %w (apt-get install busybox-static)", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return layer(map[string][]byte{"bin/busybox": data, "bin/sh": nil, "bin/sleep": nil}), nil
}

// layer makes a layer of files; a nil body is a link to busybox.
func layer(files map[string][]byte) v1.Layer {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	dirs := map[string]bool{}
	for _, n := range names {
		if d := filepath.Dir(n); d != "." && !dirs[d] {
			dirs[d] = true
			_ = tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755})
		}
		body := files[n]
		if body == nil {
			_ = tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777})
			continue
		}
		_ = tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(body))})
		_, _ = tw.Write(body)
	}
	_ = tw.Close()
	data := buf.Bytes()
	l, _ := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	return l
}

func push(addr, repo string, layers ...v1.Layer) (string, error) {
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return "", err
	}
	if img, err = mutate.Config(img, v1.Config{Env: []string{"PATH=/bin"}}); err != nil {
		return "", err
	}
	ref, err := name.ParseReference(addr+"/"+repo, name.Insecure)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return ref.Name(), nil
}
