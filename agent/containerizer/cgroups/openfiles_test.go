package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/privileged"
)

// TestOpenFiles: a kept file is re-read whole at every read (what was
// written since shows, a file larger than the first buffer too); a missing
// path is the same error as os.ReadFile's; past MaxOpenFiles paths are
// read with os.ReadFile and counted; nil reads with os.ReadFile.
func TestOpenFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "cpu.max")
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var o OpenFiles
	defer o.Close()
	for _, content := range []string{"max 100000\n", "50000 100000\n", strings.Repeat("8:0 rbytes=1 wbytes=2\n", 500)} {
		write(file, content)
		got, err := o.ReadFile(file)
		if err != nil || string(got) != content {
			t.Fatalf("ReadFile = %.40q, %v; want %.40q", got, err, content)
		}
	}
	if _, err := o.ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist", err)
	}
	for i := range MaxOpenFiles + 3 {
		path := filepath.Join(dir, fmt.Sprintf("f%d", i))
		write(path, fmt.Sprint(i))
		if got, err := o.ReadFile(path); err != nil || string(got) != fmt.Sprint(i) {
			t.Fatalf("file %d: %q, %v", i, got, err)
		}
	}
	// cpu.max and 15 of the others are kept; 4 were read past the bound.
	if len(o.files) != MaxOpenFiles || o.Overflows() != 4 {
		t.Errorf("%d files kept, %d overflows; want %d and 4", len(o.files), o.Overflows(), MaxOpenFiles)
	}
	if err := o.Close(); err != nil || len(o.files) != 0 {
		t.Errorf("Close: %v, %d files left", err, len(o.files))
	}
	var none *OpenFiles
	if got, err := none.ReadFile(file); err != nil || !strings.HasPrefix(string(got), "8:0") {
		t.Errorf("nil OpenFiles: %.20q, %v", got, err)
	}
}

// TestHeldFiles (#29): a held path answers from its last read, content or
// absence, until the first read after the next multiple of the period on
// the clock or until Forget; other errors are not held; past MaxOpenFiles
// paths are read every time and counted.
func TestHeldFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lever, missing := filepath.Join(dir, "cpu.max"), filepath.Join(dir, "cpuset.effective_cpus")
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(100 * time.Millisecond)
	o := NewHeldFiles(time.Second, func() time.Time { return now })
	defer o.Close()
	read := func(path string) string {
		t.Helper()
		data, err := o.ReadFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "absent"
		case err != nil:
			t.Fatalf("ReadFile %s: %v", path, err)
		}
		return string(data)
	}
	write(lever, "max 100000\n")
	steps := []struct {
		name           string
		at             time.Duration // after t0
		write          string        // written to lever before the reads ("": nothing)
		make           bool          // missing created before the reads
		forget         bool
		lever, missing string // what the reads return
	}{
		{name: "first reads", at: 100 * time.Millisecond, lever: "max 100000\n", missing: "absent"},
		{name: "held within the second", at: 900 * time.Millisecond, write: "50000 100000\n", make: true, lever: "max 100000\n", missing: "absent"},
		{name: "read again after the boundary", at: 1000 * time.Millisecond, lever: "50000 100000\n", missing: "0-1\n"},
		{name: "held again", at: 1500 * time.Millisecond, write: "max 100000\n", lever: "50000 100000\n", missing: "0-1\n"},
		{name: "Forget reads at once", at: 1600 * time.Millisecond, forget: true, lever: "max 100000\n", missing: "0-1\n"},
		{name: "clock went back: read", at: 900 * time.Millisecond, write: "20000 100000\n", lever: "20000 100000\n", missing: "0-1\n"},
	}
	for _, s := range steps {
		now = t0.Add(s.at)
		if s.write != "" {
			write(lever, s.write)
		}
		if s.make {
			write(missing, "0-1\n")
		}
		if s.forget {
			o.Forget()
		}
		if got := read(lever); got != s.lever {
			t.Errorf("%s: lever %q, want %q", s.name, got, s.lever)
		}
		if got := read(missing); got != s.missing {
			t.Errorf("%s: missing %q, want %q", s.name, got, s.missing)
		}
	}

	// An error other than absence is not held: reading a directory fails
	// at every read, and then reads what the path holds.
	odd := filepath.Join(dir, "odd")
	if err := os.Mkdir(odd, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := o.ReadFile(odd); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("reading a directory: %v, want an error other than absence", err)
	}
	if err := os.Remove(odd); err != nil {
		t.Fatal(err)
	}
	write(odd, "1\n")
	if got := read(odd); got != "1\n" {
		t.Errorf("after a failed read: %q, want the file's content", got)
	}

	// Past MaxOpenFiles held paths, reads read every time and count.
	for i := range MaxOpenFiles {
		write(filepath.Join(dir, fmt.Sprintf("f%d", i)), "a")
		read(filepath.Join(dir, fmt.Sprintf("f%d", i)))
	}
	before := o.Overflows()
	last := filepath.Join(dir, fmt.Sprintf("f%d", MaxOpenFiles-1))
	write(last, "b")
	if got := read(last); got != "b" || len(o.held) != MaxOpenFiles || o.Overflows() == before {
		t.Errorf("past the bound: %q, %d held, overflows %d -> %d; want \"b\", %d held, counted", got, len(o.held), before, o.Overflows(), MaxOpenFiles)
	}
}

// TestOpenFilesRecreatedCgroup: on a real cgroup, a kept file follows
// writes made through other descriptors, and once its cgroup is removed
// and made again at the same path, reads show the new cgroup's file, not
// an error or the old one's.
func TestOpenFilesRecreatedCgroup(t *testing.T) {
	privileged.Require(t)
	l, root := realRoot(t, "openfiles")
	l.Files = &OpenFiles{}
	defer l.Files.Close()
	rel := Subtree(root, Revocable)
	dir := filepath.Join(l.Unified, rel)
	if _, err := os.Stat(filepath.Join(dir, "cgroup.freeze")); err != nil {
		t.Skipf("no cgroup.freeze: %v", err)
	}
	frozen := func(want bool) {
		t.Helper()
		if got, err := l.Frozen(rel); err != nil || got != want {
			t.Fatalf("Frozen = %v, %v; want %v", got, err, want)
		}
	}
	frozen(false)
	if err := l.SetFrozen(rel, true); err != nil {
		t.Fatal(err)
	}
	frozen(true)
	if err := l.SetFrozen(rel, false); err != nil {
		t.Fatal(err)
	}
	frozen(false)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l.SetFrozen(rel, true); err != nil {
		t.Fatal(err)
	}
	frozen(true) // the new cgroup's file
	if err := l.SetFrozen(rel, false); err != nil {
		t.Fatal(err)
	}
	frozen(false)
}

// TestFile: one read returns what fits in the buffer from the offset, a
// short count when the content ends first (0 at or past the end, never
// io.EOF), and a *fs.PathError naming the file when the read fails.
func TestFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "memory.stat")
	if err := os.WriteFile(path, []byte("anon 4096\nfile 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		size int
		off  int64
		want string
	}{
		{64, 0, "anon 4096\nfile 0\n"}, // shorter than the buffer: the whole content
		{4, 0, "anon"},                 // the buffer full: maybe more
		{64, 5, "4096\nfile 0\n"},
		{64, 17, ""}, // at the end
		{64, 40, ""}, // past it
	} {
		buf := make([]byte, tc.size)
		n, err := f.ReadAt(buf, tc.off)
		if err != nil || string(buf[:n]) != tc.want {
			t.Errorf("ReadAt(%d bytes at %d) = %q, %v; want %q, nil", tc.size, tc.off, buf[:n], err, tc.want)
		}
	}
	if f.Name() != path {
		t.Errorf("Name() = %q, want %q", f.Name(), path)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var pe *fs.PathError
	if _, err := f.ReadAt(make([]byte, 8), 0); !errors.As(err, &pe) || pe.Path != path {
		t.Errorf("ReadAt of a closed file: %v, want a *fs.PathError for %s", err, path)
	}
	if _, err := OpenFile(filepath.Join(t.TempDir(), "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenFile of a missing path: %v, want fs.ErrNotExist", err)
	}
}

// realRoot detects the host's real cgroups and sets up a root named
// slackline-test-<name>-<n> there, removed (tasks killed) at cleanup.
func realRoot(t *testing.T, name string) (Layout, string) {
	t.Helper()
	l, err := Detect(cgrouptest.Mountpoint)
	if err != nil {
		t.Fatal(err)
	}
	root := fmt.Sprintf("slackline-test-%s-%d", name, time.Now().UnixNano()%1e9)
	t.Cleanup(func() { cgrouptest.RemoveRoot(root) })
	if err := l.SetupRoot(root); err != nil {
		t.Fatal(err)
	}
	return l, root
}
