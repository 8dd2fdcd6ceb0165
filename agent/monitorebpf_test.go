package agent

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/privileged"
)

// TestMonitorSeesIdleContainerStartBurning: with the real eBPF programs,
// the monitor skips the cpu.stat of a container that has not run, and a
// container that starts burning CPU after being idle is seen at the very
// next pass (its CPU time and rate grow), not at the next once-a-second
// refresh.
func TestMonitorSeesIdleContainerStartBurning(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	layout, rel, m := monitoredCgroup(t)

	// The shell waits for a line, burns CPU, says so and burns on.
	cg, err := os.Open(filepath.Join(layout.Unified, rel))
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	sh := exec.Command("sh", "-c", `read go; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; echo burnt; while :; do :; done`)
	sh.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cg.Fd())}
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = sh.Process.Kill()
		_ = sh.Wait()
	}()

	// Idle passes, 100 ms apart on the monitor's clock (the shell blocks
	// in read; when it got there does not matter).
	t0 := time.Now()
	var idle monitor.Usage
	for i := range 3 {
		if err := m.Sample(t0.Add(time.Duration(i) * 100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		var ok bool
		if idle, ok = m.Latest("c"); !ok || !idle.EBPF {
			t.Fatalf("pass %d: no sample with eBPF figures (%+v)", i, idle)
		}
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "burnt\n" {
		t.Fatalf("the shell said %q, %v", line, err)
	}
	// One pass later, well within the refresh interval of the last read.
	if err := m.Sample(t0.Add(300 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	busy, _ := m.Latest("c")
	if busy.Stats.GetCpusUsageSecs() <= idle.Stats.GetCpusUsageSecs() || busy.CPURate <= 0 {
		t.Fatalf("after burning CPU the next pass shows usage %v s (idle: %v s), rate %v: the cpu.stat read was skipped",
			busy.Stats.GetCpusUsageSecs(), idle.Stats.GetCpusUsageSecs(), busy.CPURate)
	}
}

// TestMonitorSeesIdleContainerMemoryGrow: with the real eBPF programs and
// a real cgroup, a container idle for a few passes whose memory then grows
// (a process in it writes a 32 MiB file: page cache charged to it) shows the growth in
// its usage within refreshInterval (1 s) of the monitor's clock, the
// bound monitor's doc.go states; here at the next pass, as the writer ran.
func TestMonitorSeesIdleContainerMemoryGrow(t *testing.T) {
	privileged.Require(t)
	t.Parallel()
	layout, rel, m := monitoredCgroup(t)

	t0 := time.Now()
	var idle monitor.Usage
	for i := range 3 {
		if err := m.Sample(t0.Add(time.Duration(i) * 100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		idle, _ = m.Latest("c")
	}
	// The writer joins the cgroup of the memory controller that counts
	// (v2, or the v1 memory hierarchy on hybrid hosts) and v2's (eBPF).
	file := filepath.Join(t.TempDir(), "grow") // its page cache is charged to the writer's cgroup
	const grow = 32 << 20
	script := `for d in "$@"; do echo $$ > "$d/cgroup.procs"; done; exec dd if=/dev/zero of=` + file + ` bs=1M count=32 status=none`
	args := append([]string{"-c", script, "sh"}, layout.PathsOf(rel).Dirs()...)
	if out, err := exec.Command("sh", args...).CombinedOutput(); err != nil {
		t.Fatalf("write %s in the container: %v\n%s", file, err, out)
	}
	var grown monitor.Usage
	for at := 300 * time.Millisecond; at <= 200*time.Millisecond+time.Second; at += 100 * time.Millisecond {
		if err := m.Sample(t0.Add(at)); err != nil {
			t.Fatal(err)
		}
		if grown, _ = m.Latest("c"); grown.MemUsage >= idle.MemUsage+grow {
			return
		}
	}
	t.Fatalf("usage %d bytes a second after the container grew by %d (idle: %d)", grown.MemUsage, grow, idle.MemUsage)
}

// monitoredCgroup makes a cgroup "c" under a test root of its own (in
// every hierarchy), loads the real eBPF programs tracking it and returns a
// monitor of it; everything is released when the test ends.
func monitoredCgroup(t *testing.T) (cgroups.Layout, string, *monitor.Monitor) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	layout, err := cgroups.Detect(cgrouptest.Mountpoint)
	if err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	root := "slackline-monitortest-" + hex.EncodeToString(suffix)
	t.Cleanup(func() { cgrouptest.RemoveRoot(root) })
	rel := filepath.Join(root, "c")
	for _, d := range layout.PathsOf(rel).Dirs() {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	id, err := bpf.CgroupID(filepath.Join(layout.Unified, rel))
	if err != nil {
		t.Fatal(err)
	}
	progs, err := bpf.Load(bpf.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("load eBPF: %v", err)
	}
	t.Cleanup(func() { progs.Close() })
	if err := progs.Track(id, bpf.ClassGuaranteed); err != nil {
		t.Fatal(err)
	}
	m, err := monitor.New(monitor.Config{Mode: string(layout.Mode), EBPF: MonitorStats(progs), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	m.SetTargets([]monitor.Target{{ID: "c", CgroupPath: rel, CgroupID: id}})
	return layout, rel, m
}
