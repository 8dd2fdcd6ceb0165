package containerizer

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeQueue makes a fake sysfs request queue for dev under sys with the
// given max_sectors_kb and max_hw_sectors_kb.
func fakeQueue(t *testing.T, sys, dev, own, hw string) string {
	t.Helper()
	q := filepath.Join(sys, "dev", "block", dev, "queue")
	if err := os.MkdirAll(q, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"max_sectors_kb": own + "\n", "max_hw_sectors_kb": hw + "\n"} {
		if err := os.WriteFile(filepath.Join(q, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(q, "max_sectors_kb")
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// TestDiskRequestKiB: lowering saves the device's own size under the
// state directory once (a second lowering does not save the lowered one),
// never goes above the device's own or hardware limit, and 0 puts the own
// size back and forgets it; a containerizer started while it is lowered
// (an agent restarted) still puts the own size back.
func TestDiskRequestKiB(t *testing.T) {
	t.Parallel()
	sys, state, host := t.TempDir(), t.TempDir(), t.TempDir()
	file := fakeQueue(t, sys, "7:0", "1280", "1280")
	small := fakeQueue(t, sys, "8:0", "16", "64")
	newC := func() *Containerizer {
		return &Containerizer{cfg: Config{SysRoot: sys, StateDir: state, DiskRequestDir: host}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			diskIO: DiskIOSupport{RequestSize: true, Devices: []string{"7:0", "8:0"}}}
	}
	c := newC()
	steps := []struct {
		kib         uint64
		want, want8 string
		lowered     bool
	}{
		{0, "1280", "16", false}, // nothing lowered: nothing to put back
		{32, "32", "16", true},   // never above the device's own
		{64, "64", "16", true},   // the own size stays the one saved first
		{0, "1280", "16", false},
		{2048, "1280", "16", true}, // never above its own (or hardware) limit
		{0, "1280", "16", false},
	}
	for i, st := range steps {
		if err := c.SetDiskRequestKiB(st.kib); err != nil {
			t.Fatalf("step %d: SetDiskRequestKiB(%d): %v", i, st.kib, err)
		}
		if got, got8 := readTrim(t, file), readTrim(t, small); got != st.want || got8 != st.want8 {
			t.Errorf("step %d: max_sectors_kb %s and %s, want %s and %s", i, got, got8, st.want, st.want8)
		}
		if kib, lowered, err := c.DiskRequestKiB(); err != nil || lowered != st.lowered || kib == 0 {
			t.Errorf("step %d: DiskRequestKiB = %d, %v, %v; want lowered %v", i, kib, lowered, err, st.lowered)
		}
	}
	// The same size again is not written: a write of max_sectors_kb
	// freezes the device's queue.
	if err := c.SetDiskRequestKiB(32); err != nil {
		t.Fatal(err)
	}
	old := time.Unix(1e9, 0)
	if err := os.Chtimes(file, old, old); err != nil {
		t.Fatal(err)
	}
	if err := c.SetDiskRequestKiB(32); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(file); err != nil || !st.ModTime().Equal(old) {
		t.Errorf("max_sectors_kb written again with the size it had (modified %v, %v)", st.ModTime(), err)
	}
	if err := c.SetDiskRequestKiB(0); err != nil {
		t.Fatal(err)
	}
	// An agent restarted while the size is lowered: a new containerizer
	// on the same state directory puts the saved size back.
	if err := c.SetDiskRequestKiB(32); err != nil {
		t.Fatal(err)
	}
	if err := newC().SetDiskRequestKiB(0); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, file); got != "1280" {
		t.Errorf("after a restart: max_sectors_kb %s, want 1280", got)
	}
	if entries, err := os.ReadDir(host); err != nil || len(entries) != 1 || entries[0].Name() != "lock" {
		t.Errorf("the host-wide record is kept after the size was put back: %v, %v", entries, err)
	}
	// A host without the knob says why.
	none := &Containerizer{cfg: Config{SysRoot: sys, StateDir: state, DiskRequestDir: host}, diskIO: DiskIOSupport{RequestSizeWhy: "cannot write it"}}
	if err := none.SetDiskRequestKiB(32); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "cannot write it") {
		t.Errorf("unsupported: %v", err)
	}
	if ok, why := requestSizeSupport(sys, []string{"9:9"}); ok || !strings.Contains(why, "9:9") {
		t.Errorf("requestSizeSupport of a missing device = %v, %q", ok, why)
	}
	if ok, _ := requestSizeSupport(sys, []string{"7:0"}); !ok {
		t.Error("requestSizeSupport of a writable queue file = false")
	}
}

// TestDiskRequestKiBTwoAgents: two agents of one host lower the same
// disk. The second does not take the first's lowered size for the
// device's own; the first putting it back only drops its hold while the
// second still holds it, and the last one puts the own size back.
func TestDiskRequestKiBTwoAgents(t *testing.T) {
	t.Parallel()
	sys, host := t.TempDir(), t.TempDir()
	file := fakeQueue(t, sys, "7:0", "1280", "1280")
	agent := func() *Containerizer {
		return &Containerizer{cfg: Config{SysRoot: sys, StateDir: t.TempDir(), DiskRequestDir: host}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			diskIO: DiskIOSupport{RequestSize: true, Devices: []string{"7:0"}}}
	}
	a, b := agent(), agent()
	steps := []struct {
		c    *Containerizer
		kib  uint64
		want string
	}{
		{a, 32, "32"},
		{b, 64, "32"}, // the smaller of the two holds
		{a, 0, "32"},  // b still holds it lowered
		{b, 64, "64"},
		{b, 0, "1280"}, // the last holder puts the device's own back
	}
	for i, st := range steps {
		if err := st.c.SetDiskRequestKiB(st.kib); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := readTrim(t, file); got != st.want {
			t.Errorf("step %d: max_sectors_kb %s, want %s", i, got, st.want)
		}
	}
	if _, lowered, err := a.DiskRequestKiB(); err != nil || lowered {
		t.Errorf("a after putting it back: lowered %v, %v", lowered, err)
	}
}
