package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// writeTree creates files (path -> content) under a new temporary root.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// fakeV2 is a pure cgroup v2 mount whose root delegates cpu and memory.
func fakeV2(t *testing.T) string {
	return writeTree(t, map[string]string{
		"cgroup.controllers":     "cpuset cpu io memory hugetlb pids rdma misc\n",
		"cgroup.subtree_control": "cpu io memory pids\n",
	})
}

// fakeHybrid is a hybrid host: v1 cpu and memory, controller-less v2 tree.
func fakeHybrid(t *testing.T, swap bool) string {
	files := map[string]string{
		"unified/cgroup.controllers":   "",
		"unified/cgroup.procs":         "",
		"cpu/cpu.shares":               "1024\n",
		"memory/memory.limit_in_bytes": "9223372036854771712\n",
	}
	if swap {
		files["memory/memory.memsw.limit_in_bytes"] = "9223372036854771712\n"
	}
	return writeTree(t, files)
}

// readFile reads a control file of a fake tree. containerd creates missing
// files with mode 0 (real control files always exist), so it is made
// readable first for a non-root test run.
func readFile(t *testing.T, path string) string {
	t.Helper()
	_ = os.Chmod(path, 0o644)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return strings.TrimSpace(string(data))
}

func TestDetect(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		want    Mode
		wantErr string
	}{
		{"v2", map[string]string{"cgroup.controllers": "cpu io memory pids"}, ModeV2, ""},
		{"hybrid", map[string]string{"unified/cgroup.controllers": "", "cpu/cpu.shares": "1024", "memory/memory.limit_in_bytes": "1"}, ModeHybrid, ""},
		{"v2 without memory", map[string]string{"cgroup.controllers": "cpu io pids"}, "", "has no memory controller"},
		{"hybrid without cpu", map[string]string{"unified/cgroup.controllers": "", "memory/memory.limit_in_bytes": "1"}, "", "v1 cpu controller is not mounted"},
		{"hybrid without memory", map[string]string{"unified/cgroup.controllers": "", "cpu/cpu.shares": "1024"}, "", "v1 memory controller is not mounted"},
		{"pure v1", map[string]string{"cpu/cpu.shares": "1024", "memory/memory.limit_in_bytes": "1"}, "", "pure cgroup v1"},
		{"nothing", map[string]string{"README": ""}, "", "no cgroup filesystem"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mnt := writeTree(t, tt.files)
			l, err := Detect(mnt)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Detect error = %v, want ErrUnsupported containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || l.Mode != tt.want {
				t.Fatalf("Detect = %+v, %v; want mode %s", l, err, tt.want)
			}
			wantUnified := mnt
			if tt.want == ModeHybrid {
				wantUnified = filepath.Join(mnt, "unified")
			}
			if l.Unified != wantUnified {
				t.Errorf("Unified = %s, want %s", l.Unified, wantUnified)
			}
		})
	}
}

func TestDecisions(t *testing.T) {
	tests := []struct {
		cpus        float64
		weight      uint64
		shares      uint64
		quota       int64
		quotaOK     bool
		memMiB      float64
		memoryBytes int64
	}{
		{0, 1, 2, 0, false, 0, 0},
		{0.001, 1, 2, 1000, true, 1, 1 << 20},
		{0.25, 25, 256, 25000, true, 64, 64 << 20},
		{1, 100, 1024, 100000, true, 128.5, 134742016},
		{4, 400, 4096, 400000, true, 8192, 8192 << 20},
		{150, 10000, 153600, 15000000, true, 0.5, 524288},
	}
	for _, tt := range tests {
		if got := CPUWeight(tt.cpus); got != tt.weight {
			t.Errorf("CPUWeight(%v) = %d, want %d", tt.cpus, got, tt.weight)
		}
		if got := CPUShares(tt.cpus); got != tt.shares {
			t.Errorf("CPUShares(%v) = %d, want %d", tt.cpus, got, tt.shares)
		}
		quota, period, ok := CFSQuota(tt.cpus)
		if ok != tt.quotaOK || (ok && (quota != tt.quota || period != 100000)) {
			t.Errorf("CFSQuota(%v) = %d, %d, %v; want %d, 100000, %v", tt.cpus, quota, period, ok, tt.quota, tt.quotaOK)
		}
		if got := MemoryBytes(tt.memMiB); got != tt.memoryBytes {
			t.Errorf("MemoryBytes(%v) = %d, want %d", tt.memMiB, got, tt.memoryBytes)
		}
	}
}

func TestSetupRootV2(t *testing.T) {
	mnt := fakeV2(t)
	// A kernel with cpu.idle: the file exists in a real cgroup; here it is
	// pre-created in the (already existing) revocable subtree.
	if err := os.MkdirAll(filepath.Join(mnt, "slackline-revocable"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "slackline-revocable/cpu.idle"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Detect(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetupRoot("slackline"); err != nil {
		t.Fatalf("SetupRoot: %v", err)
	}
	want := map[string]string{
		"slackline/cgroup.subtree_control":            "+cpu +memory +pids",
		"slackline/guaranteed/cgroup.subtree_control": "+cpu +memory +pids",
		"slackline-revocable/cgroup.subtree_control":  "+cpu +memory +pids",
		"slackline-revocable/cpu.weight":              "1",
		"slackline-revocable/cpu.idle":                "1",
	}
	for file, value := range want {
		if got := readFile(t, filepath.Join(mnt, file)); got != value {
			t.Errorf("%s = %q, want %q", file, got, value)
		}
	}
	if _, err := os.Stat(filepath.Join(mnt, "slackline/guaranteed/cpu.weight")); err == nil {
		t.Error("guaranteed subtree got a cpu.weight; it keeps the default")
	}
	if got := readFile(t, filepath.Join(mnt, "cgroup.subtree_control")); got != "cpu io memory pids" {
		t.Errorf("the mountpoint's subtree_control was changed to %q; it is not ours", got)
	}

	// Again, as after an agent restart: the kernel refuses weight writes on
	// an idle group, so the weight is left alone.
	_ = os.Chmod(filepath.Join(mnt, "slackline-revocable/cpu.weight"), 0o644)
	if err := os.WriteFile(filepath.Join(mnt, "slackline-revocable/cpu.weight"), []byte("100"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := l.SetupRoot("slackline"); err != nil {
		t.Fatalf("second SetupRoot: %v", err)
	}
	if got := readFile(t, filepath.Join(mnt, "slackline-revocable/cpu.weight")); got != "100" {
		t.Errorf("cpu.weight of an idle group rewritten to %q", got)
	}
}

func TestSetupRootV2NotDelegated(t *testing.T) {
	mnt := writeTree(t, map[string]string{
		"cgroup.controllers":     "cpu io memory pids",
		"cgroup.subtree_control": "io pids",
	})
	l, err := Detect(mnt)
	if err != nil {
		t.Fatal(err)
	}
	err = l.SetupRoot("slackline")
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "does not delegate the cpu and memory controller(s)") ||
		!strings.Contains(err.Error(), "Delegate=yes") {
		t.Fatalf("SetupRoot error = %v", err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "slackline")); err == nil {
		t.Error("root created although it cannot be used")
	}
}

func TestSetupRootHybrid(t *testing.T) {
	mnt := fakeHybrid(t, false)
	l, err := Detect(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetupRoot("agent2"); err != nil {
		t.Fatalf("SetupRoot: %v", err)
	}
	for _, h := range []string{"cpu", "memory", "unified"} {
		for _, sub := range []string{"agent2/guaranteed", "agent2-revocable"} {
			if st, err := os.Stat(filepath.Join(mnt, h, sub)); err != nil || !st.IsDir() {
				t.Errorf("%s/%s missing: %v", h, sub, err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(mnt, "cpu/agent2/revocable")); err == nil {
		t.Error("revocable subtree under the root: it would be idle only next to the guaranteed one")
	}
	if got := readFile(t, filepath.Join(mnt, "cpu/agent2-revocable/cpu.shares")); got != "2" {
		t.Errorf("revocable cpu.shares = %q, want 2", got)
	}
	if _, err := os.Stat(filepath.Join(mnt, "unified/agent2/cgroup.subtree_control")); err == nil {
		t.Error("controllers enabled on the hybrid v2 tree, which has none")
	}
}

func TestCreate(t *testing.T) {
	const rel = "slackline/guaranteed/c1"
	tests := []struct {
		name  string
		mnt   func(t *testing.T) string
		lim   Limits
		want  map[string]string // file (relative to mnt) -> value
		unset []string          // files that must not be written
	}{
		{
			name: "v2 weight only", mnt: fakeV2,
			lim: Limits{CPUs: 0.5, MemoryBytes: 64 << 20},
			want: map[string]string{
				rel + "/cpu.weight": "50",
				rel + "/memory.max": "67108864",
			},
			unset: []string{rel + "/cpu.max", rel + "/memory.swap.max"},
		},
		{
			name: "v2 hard limit", mnt: fakeV2,
			lim: Limits{CPUs: 2, HardCPU: true, MemoryBytes: 1 << 30},
			want: map[string]string{
				rel + "/cpu.weight": "200",
				rel + "/cpu.max":    "200000 100000",
				rel + "/memory.max": "1073741824",
			},
		},
		{
			name: "v2 no memory limit", mnt: fakeV2,
			lim:   Limits{CPUs: 1},
			want:  map[string]string{rel + "/cpu.weight": "100"},
			unset: []string{rel + "/memory.max"},
		},
		{
			name: "hybrid weight only", mnt: func(t *testing.T) string { return fakeHybrid(t, false) },
			lim: Limits{CPUs: 0.5, MemoryBytes: 64 << 20},
			want: map[string]string{
				"cpu/" + rel + "/cpu.shares":               "512",
				"memory/" + rel + "/memory.limit_in_bytes": "67108864",
			},
			unset: []string{"cpu/" + rel + "/cpu.cfs_quota_us", "memory/" + rel + "/memory.memsw.limit_in_bytes"},
		},
		{
			name: "hybrid hard limit and swap accounting", mnt: func(t *testing.T) string { return fakeHybrid(t, true) },
			lim: Limits{CPUs: 1.5, HardCPU: true, MemoryBytes: 256 << 20},
			want: map[string]string{
				"cpu/" + rel + "/cpu.shares":                     "1536",
				"cpu/" + rel + "/cpu.cfs_quota_us":               "150000",
				"cpu/" + rel + "/cpu.cfs_period_us":              "100000",
				"memory/" + rel + "/memory.limit_in_bytes":       "268435456",
				"memory/" + rel + "/memory.memsw.limit_in_bytes": "268435456",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mnt := tt.mnt(t)
			l, err := Detect(mnt)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.SetupRoot("slackline"); err != nil {
				t.Fatal(err)
			}
			p, err := l.Create(rel, tt.lim)
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if p.Rel != rel || p.Unified != filepath.Join(l.Unified, rel) {
				t.Errorf("paths = %+v", p)
			}
			for file, value := range tt.want {
				if got := readFile(t, filepath.Join(mnt, file)); got != value {
					t.Errorf("%s = %q, want %q", file, got, value)
				}
			}
			for _, file := range tt.unset {
				if _, err := os.Stat(filepath.Join(mnt, file)); err == nil {
					t.Errorf("%s written, want it left alone", file)
				}
			}
			if _, err := l.Create(rel, tt.lim); err == nil {
				t.Error("second Create of the same cgroup succeeded")
			}
			if err := p.Remove(); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			for _, d := range p.Dirs() {
				if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s still exists", d)
				}
			}
		})
	}
}

// TestV2ResourcesSwap covers the swap decision on v2: memory.swap.max only
// exists in real cgroups (created by the kernel with the memory controller).
func TestV2ResourcesSwap(t *testing.T) {
	res := v2Resources(Limits{CPUs: 1, MemoryBytes: 1 << 20}, true)
	if res.Memory.Swap == nil || *res.Memory.Swap != 0 {
		t.Errorf("swap = %v, want 0 (no swap beyond mem)", res.Memory.Swap)
	}
	if res := v2Resources(Limits{CPUs: 1}, true); res.Memory.Swap != nil {
		t.Errorf("swap limited without a memory limit: %v", *res.Memory.Swap)
	}
}

func TestOOMKills(t *testing.T) {
	mnt := writeTree(t, map[string]string{
		"v2/memory.events":       "low 0\nhigh 0\nmax 12\noom 2\noom_kill 3\noom_group_kill 0\n",
		"v1/memory.oom_control":  "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n",
		"old/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n",
	})
	tests := []struct {
		p    Paths
		want uint64
	}{
		{Paths{Unified: filepath.Join(mnt, "v2")}, 3},
		{Paths{Unified: filepath.Join(mnt, "x"), Memory: filepath.Join(mnt, "v1")}, 5},
		{Paths{Unified: filepath.Join(mnt, "x"), Memory: filepath.Join(mnt, "old")}, 0},
	}
	for _, tt := range tests {
		if got, err := tt.p.OOMKills(); err != nil || got != tt.want {
			t.Errorf("OOMKills(%+v) = %d, %v; want %d", tt.p, got, err, tt.want)
		}
	}
}

func TestPathsOf(t *testing.T) {
	hybrid := Layout{Mode: ModeHybrid, Mountpoint: "/m", Unified: "/m/unified", CPU: "/m/cpu", Memory: "/m/memory"}
	got := hybrid.PathsOf(ContainerRel("root", Revocable, "id"))
	want := Paths{Rel: "root-revocable/id", UnifiedMount: "/m/unified", Unified: "/m/unified/root-revocable/id",
		CPU: "/m/cpu/root-revocable/id", Memory: "/m/memory/root-revocable/id"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hybrid paths (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{want.Unified + "/cgroup.procs", want.CPU + "/cgroup.procs", want.Memory + "/cgroup.procs"}, got.ProcsFiles()); diff != "" {
		t.Errorf("procs files (-want +got):\n%s", diff)
	}
	v2 := Layout{Mode: ModeV2, Mountpoint: "/m", Unified: "/m"}
	if got := v2.PathsOf("r/guaranteed/x").Dirs(); !cmp.Equal(got, []string{"/m/r/guaranteed/x"}) {
		t.Errorf("v2 dirs = %v", got)
	}
	for _, bad := range []string{"", "/abs", "../up", "a/../b", ".", "a/"} {
		if ValidateRoot(bad) == nil {
			t.Errorf("ValidateRoot(%q) accepted", bad)
		}
	}
}

// asUnprivileged runs fn with an unprivileged user's file-system access to a
// read-only tree. As root, setfsuid drops CAP_DAC_OVERRIDE on one locked
// thread (which then exits with its goroutine); otherwise the tree is made
// read-only with chmod.
func asUnprivileged(t *testing.T, tree string, fn func() error) error {
	t.Helper()
	if os.Geteuid() != 0 {
		_ = filepath.Walk(tree, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				_ = os.Chmod(p, 0o555)
			}
			return nil
		})
		t.Cleanup(func() {
			_ = filepath.Walk(tree, func(p string, info os.FileInfo, err error) error {
				if err == nil && info.IsDir() {
					_ = os.Chmod(p, 0o755)
				}
				return nil
			})
		})
		return fn()
	}
	// Let "nobody" traverse to the tree, as it could to /sys/fs/cgroup.
	for d := tree; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		_ = os.Chmod(d, 0o755)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded
		if err := unix.Setfsuid(65534); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func TestPermissionErrors(t *testing.T) {
	for _, mode := range []string{"v2", "hybrid"} {
		t.Run(mode, func(t *testing.T) {
			var mnt string
			if mode == "v2" {
				mnt = fakeV2(t)
			} else {
				mnt = fakeHybrid(t, true)
			}
			l, err := Detect(mnt)
			if err != nil {
				t.Fatal(err)
			}
			err = asUnprivileged(t, mnt, func() error { return l.SetupRoot("slackline") })
			if !errors.Is(err, ErrPermission) {
				t.Fatalf("SetupRoot on a read-only tree = %v, want ErrPermission", err)
			}
			first := filepath.Join(l.Unified, "slackline")
			if mode == "hybrid" {
				first = filepath.Join(l.CPU, "slackline")
			}
			want := "cannot create " + first + ": permission denied; run the agent as root or delegate the cgroup subtree (systemd Delegate=yes)"
			if err.Error() != want {
				t.Errorf("error message:\n got %q\nwant %q", err.Error(), want)
			}
		})
	}
}

func TestPermissionErrorReadOnlyFS(t *testing.T) {
	err := wrap("create", "/sys/fs/cgroup/slackline", &os.PathError{Op: "mkdir", Path: "/sys/fs/cgroup/slackline", Err: unix.EROFS})
	if !errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), "read-only file system; mount the cgroup filesystem read-write") {
		t.Errorf("EROFS error = %v", err)
	}
	if err := wrap("create", "/x", os.ErrExist); errors.Is(err, ErrPermission) {
		t.Errorf("EEXIST classified as a permission problem: %v", err)
	}
}
