package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/privileged"
)

// TestQoSDiskIOWriterVersusFsync: a revocable writer streams 256 MiB files
// with O_DIRECT while a guaranteed task writes and fsyncs 4 KiB in a loop.
// The guaranteed task's fsyncs, timed by eBPF (ext4_sync_file), drive the
// diskio controller: it caps the revocable subtree's disk I/O on the
// sandbox's disk and halves the cap down to its floor (1 MiB/s); while
// capped the writer's I/O, charged to the capped cgroup, stays under the
// cap; when the guaranteed task stops its fsyncs the controller raises the
// cap back and removes it. Never a kill, never a correction of a task.
//
// The fsync threshold is 1 µs (every fsync is "slow"), counted from one
// fsync per interval, and the floor is the 1 MiB/s trickle alone
// (--qos-diskio-floor-fraction 0: with the default 35% of the rate the
// writer reached uncapped, the floor was 35 MiB/s in a 6.12 guest whose
// writer ran fast before the first fsync, and 1 MiB/s where it had not);
// the cap the guaranteed task's first fsync starts (35% of the disk's
// rate, --qos-diskio-start-fraction) lasts while its fsyncs go on and
// 3 s after (--qos-diskio-guarded-window), and rises whether or not the
// writer at idle CPU priority fills it (--qos-diskio-increase-use 0),
// so that whether the controller acts and where it stops depend on events
// (fsyncs happening), not on how fast this host's disk is or how loaded
// it is: the test checks the mechanism
// (signal, cap on the right cgroup and device, undoing), and the
// colocation benchmark measures the latency it buys
// (--scenarios io: R, S, N).
func TestQoSDiskIOWriterVersusFsync(t *testing.T) {
	privileged.Require(t)
	addr, _, _ := startCoordinator(t)
	agent := startAgent(t, addr, "diskio", "cpus:2;mem:1024", "--monitor-interval", "100ms",
		"--oversubscribed-resources-interval", "200ms", "--estimator-window", "5s", "--qos-controller", "diskio",
		"--qos-diskio-sync-p99", "1us", "--qos-diskio-min-syncs", "1", "--qos-diskio-decrease-interval", "100ms", "--qos-diskio-calm-period", "2s",
		"--qos-diskio-floor-fraction", "0", "--qos-diskio-guarded-window", "3s", "--qos-diskio-increase-use", "0")
	workDir := agentArg(t, agent, "--work-dir")
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(workDir), &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type != unix.EXT4_SUPER_MAGIC {
		t.Skipf("the agent's work directory %s is not on ext4 (magic %#x): the fsync latency signal traces ext4_sync_file", workDir, fs.Type)
	}
	waitAgentsActive(t, addr, 1)
	waitEBPFLoaded(t, agent.node())
	disk := feature(t, agent, "disk_io")
	if disk.GetStatus() != slacklinev1.FeatureStatus_FEATURE_STATUS_AVAILABLE {
		t.Skipf("this host cannot cap revocable disk I/O: %s", disk.GetDetail())
	}
	if !strings.Contains(disk.GetDetail(), "fsync p99 of guaranteed tasks") {
		t.Fatalf("disk_io does not have the fsync latency signal: %s", disk.GetDetail())
	}
	layout, err := cgroups.Detect(cgrouptest.Mountpoint)
	if err != nil {
		t.Fatal(err)
	}
	revocable := cgroups.Subtree(agent.cgroupRoot, cgroups.Revocable)
	// Where the host lets the agent lower the disk's request size while
	// the cap is on, the device's own size must come back with calm.
	requestFile, ownRequest := "", ""
	if m := regexp.MustCompile(`request size: queue/max_sectors_kb of ([0-9]+:[0-9]+) `).FindStringSubmatch(disk.GetDetail()); m != nil {
		requestFile = filepath.Join("/sys/dev/block", m[1], "queue", "max_sectors_kb")
		ownRequest = readTrimmed(t, requestFile)
	} else {
		t.Logf("no request size mechanism: %s", disk.GetDetail())
	}

	// The guaranteed task holds the node (its unused CPU and memory are the
	// revocable slack the writer runs on) and fsyncs from when a file named go appears in its
	// sandbox until one named stop does.
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "db", "--tasks", "1",
		"--task-resources", "cpus:2;mem:1024",
		"--command", "touch db-sandbox; while [ ! -e go ]; do sleep 0.2; done; "+
			"while [ ! -e stop ]; do dd if=/dev/zero of=journal bs=4k count=1 conv=notrunc,fsync 2>/dev/null; done; exec sleep 1000")
	waitRunning(t, addr, "db", scaled(t, time.Minute))
	eventually(t, scaled(t, time.Minute), func() string {
		if m, _ := filepath.Glob(filepath.Join(workDir, "sandboxes", "*", "db-sandbox")); len(m) == 0 {
			return "guaranteed task's sandbox not marked"
		}
		return ""
	})
	sandbox := sandboxWith(t, workDir, "db-sandbox")

	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "writer", "--revocable", "--tasks", "1",
		"--task-resources", "cpus:0.1;mem:32",
		"--command", "while :; do dd if=/dev/zero of=be.dat bs=1M count=256 oflag=direct 2>/dev/null; done")
	waitRunning(t, addr, "writer", scaled(t, revocableStartTimeout))
	// The writer's I/O is charged to the revocable subtree, which the cap
	// applies to (at idle CPU priority it may take a while to issue any).
	eventually(t, scaled(t, 3*time.Minute), func() string {
		if n := writtenBytes(t, layout, revocable); n == 0 {
			return "no write charged to the revocable subtree"
		}
		return ""
	})
	// Before the first fsync a cap is on only if the guaranteed task's
	// own start read the disk (its block requests: a guest's cold page
	// cache), and then it is the start cap, not a correction of latency.
	if limit := ioLimit(t, layout, revocable); limit != 0 {
		for _, c := range corrections(t, agent) {
			if !strings.Contains(c.GetReason(), "revocable disk I/O starts capped") {
				t.Fatalf("revocable write cap %d B/s before the guaranteed task's first fsync, by %q", limit, c.GetReason())
			}
		}
		t.Logf("revocable write cap %d B/s before the first fsync: the start cap (the guaranteed task's start did disk I/O)", limit)
	}
	if err := os.WriteFile(filepath.Join(sandbox, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const floor = 1 << 20
	eventually(t, scaled(t, 3*time.Minute), func() string {
		if limit := ioLimit(t, layout, revocable); limit != floor {
			return fmt.Sprintf("revocable write cap %d B/s, want the floor %d", limit, floor)
		}
		return ""
	})
	// Capped at the floor, the writer's charged writes grow by at most the
	// cap's rate (plus one 1 MiB write in flight and the throttle's slice).
	before, from := writtenBytes(t, layout, revocable), time.Now()
	eventually(t, time.Minute, func() string {
		if time.Since(from) < 3*time.Second {
			return "measuring the capped writer"
		}
		return ""
	})
	if requestFile != "" {
		own, _ := strconv.ParseUint(ownRequest, 10, 64)
		if got, _ := strconv.ParseUint(readTrimmed(t, requestFile), 10, 64); got != min(own, 32) {
			t.Errorf("capped: %s is %d, want min(its own %d, the default 32 KiB)", requestFile, got, own)
		}
	}
	written, elapsed := writtenBytes(t, layout, revocable)-before, time.Since(from)
	if bound := uint64(elapsed.Seconds()*floor) + 3<<20; written > bound {
		t.Errorf("the capped writer wrote %d bytes in %v, over the cap's %d", written, elapsed, bound)
	}
	t.Logf("capped writer: %.1f MiB in %v", float64(written)/(1<<20), elapsed.Round(time.Millisecond))

	// Calm: the guaranteed task stops its fsyncs, the cap rises and goes.
	if err := os.WriteFile(filepath.Join(sandbox, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, scaled(t, 3*time.Minute), func() string {
		if limit := ioLimit(t, layout, revocable); limit != 0 {
			return fmt.Sprintf("revocable write cap still %d B/s", limit)
		}
		return ""
	})
	if requestFile != "" {
		// Put back right after the cap's removal, by the same correction.
		eventually(t, scaled(t, time.Minute), func() string {
			if got := readTrimmed(t, requestFile); got != ownRequest {
				return fmt.Sprintf("after the cap's removal %s is %s, want the device's own %s back", requestFile, got, ownRequest)
			}
			return ""
		})
	}

	var kinds []string
	for _, c := range corrections(t, agent) {
		kinds = append(kinds, strings.TrimPrefix(c.GetKind().String(), "CORRECTION_KIND_"))
		if c.GetController() != "diskio" || c.GetTaskId() != "" {
			t.Errorf("correction %v: want only the diskio controller's, on the subtree", c)
		}
	}
	t.Logf("corrections: %s", strings.Join(kinds, " "))
	if !inOrder(kinds, []string{"THROTTLE", "UNTHROTTLE"}) {
		t.Errorf("corrections %v, want THROTTLE ... UNTHROTTLE", kinds)
	}
	for _, name := range []string{"db", "writer"} {
		for _, task := range taskStatuses(t, addr, name) {
			if task.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING {
				t.Errorf("%s task %v %q: want it running (the controller only caps)", name, task.GetState(), task.GetStatus().GetMessage())
			}
		}
	}
}

// readTrimmed reads a small file (sysfs) without its surrounding space.
func readTrimmed(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// waitRunning waits until one of the framework's tasks runs.
func waitRunning(t *testing.T, addr, framework string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() string {
		for _, task := range taskStatuses(t, addr, framework) {
			if task.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
				return ""
			}
		}
		return framework + " task not running"
	})
}

// agentArg returns the value of one of the agent's flags.
func agentArg(t *testing.T, a *realAgent, flag string) string {
	t.Helper()
	for i, arg := range a.args {
		if arg == flag && i+1 < len(a.args) {
			return a.args[i+1]
		}
	}
	t.Fatalf("agent started without %s", flag)
	return ""
}

// sandboxWith returns the agent's sandbox directory that holds file.
func sandboxWith(t *testing.T, workDir, file string) string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(workDir, "sandboxes", "*", file))
	if err != nil || len(matches) != 1 {
		t.Fatalf("sandboxes holding %s: %v %v", file, matches, err)
	}
	return filepath.Dir(matches[0])
}

// writtenBytes reads the bytes written by the cgroup at rel (v2 io.stat
// wbytes, v1 blkio.throttle.io_service_bytes Write), on every device.
func writtenBytes(t *testing.T, l cgroups.Layout, rel string) uint64 {
	t.Helper()
	var total uint64
	if l.Mode == cgroups.ModeV2 {
		data, err := os.ReadFile(filepath.Join(l.Unified, rel, "io.stat"))
		if err != nil {
			t.Fatal(err)
		}
		for f := range strings.FieldsSeq(string(data)) {
			if v, ok := strings.CutPrefix(f, "wbytes="); ok {
				n, _ := strconv.ParseUint(v, 10, 64)
				total += n
			}
		}
		return total
	}
	data, err := os.ReadFile(filepath.Join(l.Blkio, rel, "blkio.throttle.io_service_bytes"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[1] == "Write" {
			n, _ := strconv.ParseUint(f[2], 10, 64)
			total += n
		}
	}
	return total
}

// ioLimit reads the write cap of the cgroup at rel on any device (0: none).
func ioLimit(t *testing.T, l cgroups.Layout, rel string) uint64 {
	t.Helper()
	file := filepath.Join(l.Blkio, rel, "blkio.throttle.write_bps_device")
	if l.Mode == cgroups.ModeV2 {
		file = filepath.Join(l.Unified, rel, "io.max")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for f := range strings.FieldsSeq(string(data)) {
		v, _ := strings.CutPrefix(f, "wbps=")
		if n, err := strconv.ParseUint(v, 10, 64); err == nil && !strings.Contains(f, ":") {
			return n
		}
	}
	return 0
}
