package agent

import (
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/resources"
)

// sandboxFixture is a sandboxes subsystem over a temporary directory, a
// fake containerizer and a pretend file system whose use falls by 10% with
// every sandbox removed.
type sandboxFixture struct {
	s       *sandboxes
	cz      *fakeContainerizer
	live    map[string]bool // the task machine's live containers
	limited []string        // containers killed over their disk
	usage   float64
	now     time.Time
}

func newSandboxFixture(t *testing.T, cfg SandboxConfig) *sandboxFixture {
	t.Helper()
	cfg.Dir = t.TempDir()
	cfg.setDefaults("")
	f := &sandboxFixture{cz: newFakeContainerizer(), live: map[string]bool{}, now: time.Now()}
	f.s = &sandboxes{
		cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), cz: f.cz,
		live:  func() map[string]bool { return maps.Clone(f.live) },
		limit: func(id, _ string) { f.limited = append(f.limited, id) },
		usage: func(string) (float64, error) { return f.usage, nil },
		now:   func() time.Time { return f.now },
	}
	return f
}

// sandbox creates a sandbox last changed age ago, with size bytes of
// output.
func (f *sandboxFixture) sandbox(t *testing.T, id string, age time.Duration, size int) string {
	t.Helper()
	return f.sandboxIn(t, f.s.cfg.Dir, id, age, size)
}

// sandboxIn is sandbox under the sandbox directory parent.
func (f *sandboxFixture) sandboxIn(t *testing.T, parent, id string, age time.Duration, size int) string {
	t.Helper()
	dir := filepath.Join(parent, id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "stdout")
	if err := os.WriteFile(out, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	when := f.now.Add(-age)
	for _, p := range []string{out, dir} {
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// running makes the containerizer run a container with resources res in
// sandbox dir.
func (f *sandboxFixture) running(id, res, dir string) {
	f.cz.containers[id] = &containerizer.Container{ID: id, Sandbox: dir, Spec: containerizer.Spec{ContainerID: id, Resources: resources.MustParse(res)}}
}

func (f *sandboxFixture) left(t *testing.T) []string {
	t.Helper()
	return f.leftIn(t, f.s.cfg.Dir)
}

// leftIn lists the sandboxes under the sandbox directory parent.
func (f *sandboxFixture) leftIn(t *testing.T, parent string) []string {
	t.Helper()
	entries, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

func TestSandboxGC(t *testing.T) {
	const week = 7 * 24 * time.Hour
	t.Run("ended tasks' sandboxes go after the delay, live ones never", func(t *testing.T) {
		f := newSandboxFixture(t, SandboxConfig{GCDelay: week})
		f.running("running", "cpus:1", f.sandbox(t, "running", 2*week, 10))
		f.sandbox(t, "launching", 2*week, 10)
		f.live["launching"] = true
		f.sandbox(t, "ended-old", week+time.Hour, 10)
		f.sandbox(t, "ended-recent", time.Hour, 10)
		ended := f.sandbox(t, "ended-not-destroyed", 2*week, 10)
		f.running("ended-not-destroyed", "cpus:1", ended)
		f.cz.containers["ended-not-destroyed"].Exit = &containerizer.Exit{ContainerID: "ended-not-destroyed"}
		f.s.check()
		if diff := cmp.Diff([]string{"ended-recent", "launching", "running"}, f.left(t)); diff != "" {
			t.Errorf("sandboxes left (-want +got):\n%s", diff)
		}
	})
	t.Run("above the watermark the oldest ended sandboxes go first, until below", func(t *testing.T) {
		f := newSandboxFixture(t, SandboxConfig{GCDelay: week, DiskWatermark: 0.8})
		f.usage = 0.95
		f.s.usage = func(string) (float64, error) {
			u := f.usage
			f.usage -= 0.1
			return u, nil
		}
		f.running("running", "cpus:1", f.sandbox(t, "running", 6*24*time.Hour, 10))
		for i, age := range []time.Duration{time.Hour, 3 * time.Hour, 2 * time.Hour, 4 * time.Hour} {
			f.sandbox(t, string(rune('a'+i)), age, 10)
		}
		f.s.check()
		// d (4h) and b (3h) went: 95% and 85% are above 80%; then 75% is not.
		if diff := cmp.Diff([]string{"a", "c", "running"}, f.left(t)); diff != "" {
			t.Errorf("sandboxes left (-want +got):\n%s", diff)
		}
	})
	t.Run("revocable sandboxes on a file system of their own are collected there, against its use", func(t *testing.T) {
		f := newSandboxFixture(t, SandboxConfig{GCDelay: week, DiskWatermark: 0.8, RevocableDir: t.TempDir()})
		rev := f.s.cfg.RevocableDir
		revocableUse := 0.85
		f.s.usage = func(dir string) (float64, error) {
			if dir != rev {
				return 0.5, nil // the work dir's file system: below the watermark
			}
			u := revocableUse
			revocableUse -= 0.1
			return u, nil
		}
		f.sandbox(t, "guaranteed-ended", 2*time.Hour, 10)
		f.sandboxIn(t, rev, "revocable-old", week+time.Hour, 10)
		f.sandboxIn(t, rev, "revocable-1h", time.Hour, 10)
		f.sandboxIn(t, rev, "revocable-2h", 2*time.Hour, 10)
		f.sandboxIn(t, rev, "revocable-live", 3*time.Hour, 10)
		f.live["revocable-live"] = true
		f.s.check()
		if diff := cmp.Diff([]string{"guaranteed-ended"}, f.left(t)); diff != "" {
			t.Errorf("guaranteed sandboxes left (-want +got):\n%s", diff)
		}
		// revocable-old went after the delay; revocable-2h at 85%; then
		// 75% is below the watermark.
		if diff := cmp.Diff([]string{"revocable-1h", "revocable-live"}, f.leftIn(t, rev)); diff != "" {
			t.Errorf("revocable sandboxes left (-want +got):\n%s", diff)
		}
	})
}

func TestDiskLimit(t *testing.T) {
	f := newSandboxFixture(t, SandboxConfig{})
	f.running("over", "cpus:1;disk:1", f.sandbox(t, "over", 0, 2<<20))
	f.running("within", "cpus:1;disk:4", f.sandbox(t, "within", 0, 2<<20))
	f.running("unlimited", "cpus:1", f.sandbox(t, "unlimited", 0, 8<<20))
	f.s.check()
	if diff := cmp.Diff([]string{"over"}, f.limited); diff != "" {
		t.Errorf("killed over their disk (-want +got):\n%s", diff)
	}
}

func TestDiskUsageCountsLinksOnce(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.WriteFile(data, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	one, err := diskUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Link(data, filepath.Join(dir, "again")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(dir, "root")); err != nil {
		t.Fatal(err)
	}
	two, err := diskUsage(dir)
	if err != nil || two > one+8192 || one < 1<<20 {
		t.Fatalf("usage %d, then with a hard link and a symlink to / %d (%v)", one, two, err)
	}
}
