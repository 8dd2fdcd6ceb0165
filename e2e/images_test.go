package e2e

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/privileged"
)

// registry is Debian's docker-registry (the distribution registry) on a
// loopback port, with storage of the test's own.
type registry struct {
	addr, storage string
}

// startRegistry starts docker-registry with its own config; it stops
// when the test ends.
func startRegistry(t *testing.T) *registry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Fatalf("docker-registry: %v (apt-get install docker-registry)", err)
	}
	dir := t.TempDir()
	r := &registry{addr: freeAddr(t), storage: filepath.Join(dir, "storage")}
	config := fmt.Sprintf("version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", r.storage, r.addr)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("--- docker-registry output:\n%s", out.String())
		}
	})
	eventually(t, 20*time.Second, func() string {
		resp, err := http.Get("http://" + r.addr + "/v2/")
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return resp.Status
		}
		return ""
	})
	return r
}

// busyboxLayer is a layer with the host's statically linked busybox at
// /bin and a few of its applets.
func busyboxLayer(t *testing.T) v1.Layer {
	t.Helper()
	path, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("busybox: %v (apt-get install busybox-static)", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("file", "-L", path).Output(); err == nil && !bytes.Contains(out, []byte("statically linked")) {
		t.Fatalf("%s is not statically linked (apt-get install busybox-static)", path)
	}
	entries := []tarEntry{{name: "bin/", dir: true}, {name: "bin/busybox", body: data, mode: 0o755}, {name: "etc/", dir: true}}
	for _, applet := range []string{"sh", "cat", "sleep", "ls", "id"} {
		entries = append(entries, tarEntry{name: "bin/" + applet, link: "busybox"})
	}
	return tarLayer(t, entries...)
}

type tarEntry struct {
	name string
	body []byte
	link string
	mode int64
	dir  bool
}

func tarLayer(t *testing.T, entries ...tarEntry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		switch {
		case e.dir:
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
		case e.link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, e.link, 0o777
		case hdr.Mode == 0:
			hdr.Mode = 0o644
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// push writes an image of layers (PATH=/bin) to the registry as repo.
func (r *registry) push(t *testing.T, repo string, layers ...v1.Layer) string {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.Config(img, v1.Config{Env: []string{"PATH=/bin"}}); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(r.addr+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref.Name()
}

// agentMetric reads one sample of the agent's /metrics.
func agentMetric(t *testing.T, a *realAgent, sample string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + a.listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in the agent's /metrics", sample)
	return 0
}

func (a *realAgent) images(t *testing.T) *slacklinev1.GetImagesResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := a.node().GetImages(ctx, connect.NewRequest(&slacklinev1.GetImagesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Msg
}

func imageTasks(m *slacklinev1.GetImagesResponse, ref string) (int, bool) {
	for _, img := range m.GetImages() {
		if img.GetReference() == "docker://"+ref {
			return int(img.GetTasks()), true
		}
	}
	return 0, false
}

// TestImages runs tasks from an image the test builds (a static busybox,
// a file and an /etc/os-release of its own) and pushes to a real registry
// on loopback: the task reads the file and sees the image's os-release,
// not the host's; a second task of the image pulls nothing; a wrong
// digest, a corrupt layer and an unreachable registry fail their task
// with REASON_IMAGE_PULL_FAILED naming the image; and collection under a
// budget smaller than any image keeps the layers of a running task.
func TestImages(t *testing.T) {
	privileged.Require(t)
	reg := startRegistry(t)
	base := busyboxLayer(t)
	app := reg.push(t, "e2e/app:v1", base, tarLayer(t,
		tarEntry{name: "etc/", dir: true}, tarEntry{name: "etc/os-release", body: []byte("ID=slackline-e2e\nPRETTY_NAME=\"the image's\"\n")},
		tarEntry{name: "data.txt", body: []byte("shipped in the image\n")}))
	addr, _, _ := startCoordinator(t)
	// A budget of 1 MiB: smaller than any image, so that every collection
	// has something to remove unless a live task holds it.
	a := startAgent(t, addr, "images", "cpus:2;mem:1024", "--image-disk-budget", "1")
	waitAgentsActive(t, addr, 1)
	hostRelease, _ := os.ReadFile("/etc/os-release")

	runBatch := func(t *testing.T, name, image, command string) *process {
		t.Helper()
		batch := start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", name, "--tasks", "1",
			"--max-attempts", "1", "--task-resources", "cpus:0.1;mem:32", "--image", image, "--command", command)
		waitExit(t, batch, 90*time.Second)
		return batch
	}
	taskOf := func(t *testing.T, name string) *slacklinev1.Task {
		t.Helper()
		for _, task := range taskStatuses(t, addr, name) {
			return task
		}
		t.Fatalf("no task of %s", name)
		return nil
	}

	t.Run("task sees the image's root", func(t *testing.T) {
		batch := runBatch(t, "image-1", app, "cat /data.txt /etc/os-release")
		if batch.err != nil || !strings.Contains(batch.out.String(), "1 finished, 0 failed") {
			t.Fatalf("batch-framework: %v\n%s", batch.err, batch.out.String())
		}
		out := ctl(t, addr, "logs", taskOf(t, "image-1").GetTaskId())
		if !strings.Contains(out, "shipped in the image") || !strings.Contains(out, "ID=slackline-e2e") {
			t.Errorf("the task's stdout = %q, want the image's file and os-release", out)
		}
		for line := range strings.SplitSeq(string(hostRelease), "\n") {
			if strings.HasPrefix(line, "PRETTY_NAME=") && strings.Contains(out, line) {
				t.Errorf("the task saw the host's os-release (%s)", line)
			}
		}
	})
	t.Run("a second task pulls nothing", func(t *testing.T) {
		pulls := agentMetric(t, a, `slackline_agent_image_pulls_total{result="success"}`)
		batch := runBatch(t, "image-2", app, "cat /data.txt")
		if batch.err != nil {
			t.Fatalf("batch-framework: %v\n%s", batch.err, batch.out.String())
		}
		if after := agentMetric(t, a, `slackline_agent_image_pulls_total{result="success"}`); after != pulls || pulls != 1 {
			t.Errorf("pulls: %v before the second task, %v after; want 1 and 1", pulls, after)
		}
		if hits := agentMetric(t, a, "slackline_agent_image_cache_hits_total"); hits < 1 {
			t.Errorf("cache hits = %v, want at least 1", hits)
		}
		if out := ctl(t, addr, "get", "images", "--hostname", "images"); !strings.Contains(out, "docker://"+app) {
			t.Errorf("slacklinectl get images:\n%s\nwant %s", out, app)
		}
	})
	failsWithReason := func(t *testing.T, name, image, want string) {
		t.Helper()
		batch := runBatch(t, name, image, "true")
		if batch.err == nil {
			t.Fatalf("batch-framework succeeded with image %s", image)
		}
		task := taskOf(t, name)
		st := task.GetStatus()
		if task.GetState() != slacklinev1.TaskState_TASK_STATE_FAILED || st.GetReason() != slacklinev1.Reason_REASON_IMAGE_PULL_FAILED ||
			!strings.Contains(st.GetMessage(), strings.TrimPrefix(image, "docker://")) || !strings.Contains(st.GetMessage(), want) {
			t.Errorf("task %s: %v %v %q; want FAILED, REASON_IMAGE_PULL_FAILED, naming %s and %q", task.GetTaskId(), task.GetState(), st.GetReason(), st.GetMessage(), image, want)
		}
	}
	t.Run("wrong digest", func(t *testing.T) {
		failsWithReason(t, "wrong-digest", reg.addr+"/e2e/app@sha256:"+strings.Repeat("0", 64), "not_found")
	})
	t.Run("corrupt layer", func(t *testing.T) {
		layer := tarLayer(t, tarEntry{name: "payload", body: bytes.Repeat([]byte("slackline"), 4096)})
		ref := reg.push(t, "e2e/corrupt:v1", layer)
		digest, err := layer.Digest()
		if err != nil {
			t.Fatal(err)
		}
		blob := filepath.Join(reg.storage, "docker/registry/v2/blobs/sha256", digest.Hex[:2], digest.Hex, "data")
		data, err := os.ReadFile(blob)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0xff
		if err := os.WriteFile(blob, data, 0o644); err != nil {
			t.Fatal(err)
		}
		failsWithReason(t, "corrupt", ref, "digest")
	})
	t.Run("unreachable registry", func(t *testing.T) {
		failsWithReason(t, "unreachable", freeAddr(t)+"/e2e/app:v1", "unreachable")
	})
	t.Run("collection keeps a running task's layers", func(t *testing.T) {
		other := reg.push(t, "e2e/other:v1", base, tarLayer(t, tarEntry{name: "other.txt", body: []byte("other\n")}))
		sleeper := start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "sleeper", "--tasks", "1",
			"--task-resources", "cpus:0.1;mem:32", "--image", app, "--command", "sleep 1000", "--teardown-on-exit")
		// Running, not only holding the image's lease (which it takes
		// before its container exists): an agent restarted mid-launch
		// reports the task lost and the framework runs another.
		var running string
		eventually(t, 60*time.Second, func() string {
			if n, _ := imageTasks(a.images(t), app); n != 1 {
				return fmt.Sprintf("%s used by %d tasks, want 1", app, n)
			}
			for id, task := range taskStatuses(t, addr, "sleeper") {
				if task.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
					running = id
					return ""
				}
			}
			return "no sleeper task running yet"
		})
		// An agent restarted meanwhile keeps the running task's lease.
		a.restart(t)
		waitAgentsActive(t, addr, 1)
		eventually(t, 30*time.Second, func() string {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			resp, err := a.node().GetImages(ctx, connect.NewRequest(&slacklinev1.GetImagesRequest{}))
			if err != nil {
				return err.Error()
			}
			if n, _ := imageTasks(resp.Msg, app); n != 1 {
				return fmt.Sprintf("after the agent's restart %s is used by %d tasks, want 1", app, n)
			}
			return ""
		})
		// other's pull collects: app is over the budget but live.
		if batch := runBatch(t, "other-1", other, "cat /other.txt"); batch.err != nil {
			t.Fatalf("batch-framework: %v\n%s", batch.err, batch.out.String())
		}
		if n, ok := imageTasks(a.images(t), app); !ok || n != 1 {
			t.Fatalf("after another image's pull under the budget: %s present %v with %d tasks; want kept for its running task", app, ok, n)
		}
		if st := taskStatuses(t, addr, "sleeper")[running]; st.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING {
			t.Fatalf("sleeper %s: %v, want still running across the agent's restart", running, st.GetState())
		}
		sleeper.stop() // tears the framework down: its task is killed, its lease released
		eventually(t, 60*time.Second, func() string {
			if n, _ := imageTasks(a.images(t), app); n != 0 {
				return fmt.Sprintf("%s still used by %d tasks", app, n)
			}
			return ""
		})
		if batch := runBatch(t, "other-2", other, "cat /other.txt"); batch.err != nil {
			t.Fatalf("batch-framework: %v\n%s", batch.err, batch.out.String())
		}
		if _, ok := imageTasks(a.images(t), app); ok {
			t.Errorf("%s kept after its last task ended, over the budget", app)
		}
		if _, ok := imageTasks(a.images(t), other); !ok {
			t.Errorf("%s collected though its task just ran", other)
		}
	})
}
