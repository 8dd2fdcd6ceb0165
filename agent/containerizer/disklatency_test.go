package containerizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
)

// TestDiskLatency: a target is set on the root for every sandbox disk and
// named; 0 removes one and says the kernel offers it; a host without
// io.latency (hybrid, or no file) says why when a target was asked and
// nothing when none was.
func TestDiskLatency(t *testing.T) {
	t.Parallel()
	mnt := t.TempDir()
	if err := os.MkdirAll(filepath.Join(mnt, "slackline"), 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(mnt, "slackline", "io.latency")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	v2 := &cgroups.Layout{Mode: cgroups.ModeV2, Mountpoint: mnt, Unified: mnt}
	hybrid := &cgroups.Layout{Mode: cgroups.ModeHybrid, Mountpoint: mnt, Unified: filepath.Join(mnt, "unified")}
	noFile := &cgroups.Layout{Mode: cgroups.ModeV2, Mountpoint: mnt, Unified: filepath.Join(mnt, "elsewhere")}
	for _, tc := range []struct {
		name    string
		layout  *cgroups.Layout
		target  time.Duration
		ok      bool
		why     string // a substring; "" wants an empty reason
		written string // io.latency's content after, for v2
	}{
		{"target on v2", v2, 5 * time.Millisecond, true, "io.latency target=5ms on slackline for 7:0, 8:0: while guaranteed I/O misses it", "8:0 target=5000"},
		{"removed on v2", v2, 0, false, "off (the kernel offers io.latency", "8:0 target=max"},
		{"asked on hybrid", hybrid, time.Millisecond, false, "1ms asked, not set: unsupported cgroup layout: io.latency is cgroup v2 only", ""},
		{"none asked on hybrid", hybrid, 0, false, "", ""},
		{"asked, no io.latency", noFile, time.Millisecond, false, "does not exist (the kernel lacks io.latency", ""},
	} {
		ok, why := diskLatency(tc.layout, Config{CgroupRoot: "slackline", DiskLatencyTarget: tc.target}, []string{"7:0", "8:0"})
		if ok != tc.ok || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
			t.Errorf("%s: diskLatency = %v, %q; want %v, containing %q", tc.name, ok, why, tc.ok, tc.why)
		}
		if tc.written != "" {
			// A fake file keeps the last device written; the kernel lists each.
			if data, _ := os.ReadFile(file); string(data) != tc.written {
				t.Errorf("%s: io.latency = %q, want %q", tc.name, data, tc.written)
			}
		}
	}
}
