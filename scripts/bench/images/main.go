// Command images measures task launch latency with images (run as root),
// side by side in one run: from Accept to the framework receiving
// TASK_STATE_RUNNING for a plain command task, a task of a cached image,
// and a task of an image pulled cold (a busybox-static layer plus
// --cold-mib of incompressible data, a new image each time) from Debian's
// docker-registry on loopback. Plain and cached launches alternate, one at
// a time. It also breaks the agent's part of each plain launch into the
// stages the containerizer logs (resolve, prepare, spawn, shim, report,
// checkpoint). It builds and starts the real coordinator and agent.
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
	launch := func(image string) (time.Duration, error) {
		n++
		o := <-offers
		task := frameworkapi.NewTask(fmt.Sprintf("t%d", n), "bench", o, need, &slacklinev1.CommandInfo{Value: "sleep 3600", Shell: true})
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
	// The first of each kind warms up (the cached image's one pull, page cache).
	if _, err := launch(""); err != nil {
		return err
	}
	if _, err := launch(cached); err != nil {
		return err
	}
	stages.reset()
	var plain, withImage, pulled []time.Duration
	for range *trials {
		d, err := launch("")
		if err != nil {
			return err
		}
		plain = append(plain, d)
		if d, err = launch(cached); err != nil {
			return err
		}
		withImage = append(withImage, d)
	}
	plainStages := stages.take()
	for _, ref := range colds {
		d, err := launch(ref)
		if err != nil {
			return err
		}
		pulled = append(pulled, d)
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("launch latency, Accept -> RUNNING received (load average %s):\n", strings.Join(strings.Fields(string(load))[:3], " "))
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
	fmt.Println("containerizer stages of the trials' launches (ms; from the agent's \"containerizer: launched\" log):")
	for _, kind := range []string{"false", "true"} {
		label := map[string]string{"false": "plain", "true": "cached image"}[kind]
		for _, stage := range []string{"resolve_ms", "prepare_ms", "spawn_ms", "shim_ms", "report_ms", "checkpoint_ms", "total_ms"} {
			vs := plainStages[kind][stage]
			if len(vs) == 0 {
				continue
			}
			slices.Sort(vs)
			fmt.Printf("  %-13s %-14s p50 %7.2f  p99 %7.2f\n", label, strings.TrimSuffix(stage, "_ms"), vs[len(vs)/2], vs[int(0.99*float64(len(vs)-1))])
		}
	}
	if totals := plainStages["false"]["total_ms"]; len(totals) > 0 {
		slices.Sort(totals)
		outside := float64(benchutil.Percentile(plain, 0.5, time.Microsecond).Microseconds())/1000 - totals[len(totals)/2]
		fmt.Printf("  plain: outside the containerizer (Accept, offer bookkeeping, RunTask to the agent, checkpoint, RUNNING back), p50 ~%.2f ms\n", outside)
	}
	cancel()
	agent.Process.Kill()
	return nil
}

// stageLog collects the stage fields of the agent's "containerizer:
// launched" lines, by image=true/false.
type stageLog struct {
	mu      sync.Mutex
	partial []byte
	byKind  map[string]map[string][]float64
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
		if !strings.Contains(line, `msg="containerizer: launched"`) {
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
		if s.byKind == nil {
			s.byKind = map[string]map[string][]float64{}
		}
		kind := fields["image"]
		if s.byKind[kind] == nil {
			s.byKind[kind] = map[string][]float64{}
		}
		for k, v := range fields {
			if strings.HasSuffix(k, "_ms") {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					s.byKind[kind][k] = append(s.byKind[kind][k], f)
				}
			}
		}
	}
}

func (s *stageLog) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byKind = nil
}

func (s *stageLog) take() map[string]map[string][]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.byKind
	s.byKind = nil
	return out
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
