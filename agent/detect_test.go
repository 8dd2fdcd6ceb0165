package agent

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slackline/slackline/agent/monitor"
	"github.com/slackline/slackline/agent/network"
)

// TestDetectBandwidth: the default-route interface's link speed becomes
// the bandwidth resource; an interface without a speed gives none and says
// so; --resources naming bandwidth wins without detection, and naming
// other resources keeps bandwidth detected.
func TestDetectBandwidth(t *testing.T) {
	speed := func(mbps float64, err error) func(string) (network.Bandwidth, error) {
		return func(string) (network.Bandwidth, error) { return network.Bandwidth{Interface: "eth0", Mbps: mbps}, err }
	}
	unknown := fmt.Errorf("interface eth0 reports speed -1: %w", network.ErrUnknownSpeed)
	tests := []struct {
		name     string
		override string
		detect   func(string) (network.Bandwidth, error)
		want     float64
		log      string // in the log
	}{
		{name: "link speed", detect: speed(10000, nil), want: 10000},
		{name: "virtual NIC: none, logged", detect: speed(0, unknown), log: "reports no link speed"},
		{name: "no default route: none, logged", detect: speed(0, network.ErrNoDefaultRoute), log: "no default route"},
		{name: "told", override: "bandwidth:800", detect: speed(0, errors.New("must not be called")), want: 800},
		{name: "other resources told, bandwidth still detected", override: "cpus:2", detect: speed(1000, nil), want: 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			called := false
			detect := func(sys string) (network.Bandwidth, error) { called = true; return tt.detect(sys) }
			got, err := detectResources(t.TempDir(), tt.override+";mem:1024;disk:1024", log, hostProbes{procRoot: "/proc", bandwidth: detect})
			if err != nil {
				t.Fatal(err)
			}
			if got.Bandwidth() != tt.want {
				t.Errorf("bandwidth = %v, want %v", got.Bandwidth(), tt.want)
			}
			if strings.Contains(tt.override, "bandwidth") && called {
				t.Error("detected although --resources names bandwidth")
			}
			if !strings.Contains(logs.String(), tt.log) {
				t.Errorf("log %q does not say %q", logs.String(), tt.log)
			}
		})
	}
}

// TestDetectMemoryBoundedByCgroup runs detection on fake v2 and hybrid
// trees whose agent cgroup root sits under a cgroup limited to 1536 MiB on
// a host of 8 GiB (#28): the node's mem is that limit less its reserve, a
// --resources mem above the limit is lowered to it (logged), one below it
// is kept, and without a cgroup root the host's MemTotal counts. The bound
// is the monitor's (Monitor.MemoryLimit), so the mem the agent registers,
// and therefore the slack its estimator can offer, never exceeds what the
// node's limit backs.
func TestDetectMemoryBoundedByCgroup(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	for _, layout := range []struct {
		mode, prefix, limitFile, unlimited string
	}{
		{"v2", "", "memory.max", "max\n"},
		{"hybrid", "memory/", "memory.limit_in_bytes", "9223372036854771712\n"},
	} {
		for _, tc := range []struct {
			name, root, override string
			wantMem              float64
			log                  string
		}{
			{name: "detected: the limit less half", root: "bench/node", wantMem: 768, log: "node memory bounded by a cgroup limit"},
			{name: "told more than the limit: the limit", root: "bench/node", override: "mem:2048", wantMem: 1536, log: "more than the node's memory limit"},
			{name: "told less than the limit: as told", root: "bench/node", override: "mem:1000", wantMem: 1000},
			{name: "no cgroup root: the host's", override: "", wantMem: 8000 - 1024},
		} {
			t.Run(layout.mode+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				write := func(rel, data string) {
					t.Helper()
					path := filepath.Join(dir, rel)
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				write("proc/meminfo", fmt.Sprintf("MemTotal:       %d kB\nMemFree:        1000 kB\nMemAvailable:   6000000 kB\n", 8000*1024))
				cg := "cgroup/" + layout.prefix
				write(cg+"bench/"+layout.limitFile, fmt.Sprintf("%d\n", 1536*mib))
				write(cg+"bench/node/"+layout.limitFile, layout.unlimited)
				if layout.mode == "hybrid" {
					write("cgroup/unified/cgroup.controllers", "")
				}
				mon, err := monitor.New(monitor.Config{Mode: layout.mode, CgroupMountpoint: filepath.Join(dir, "cgroup"),
					ProcRoot: filepath.Join(dir, "proc"), CgroupRoot: tc.root, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { mon.Close() })
				var logs bytes.Buffer
				log := slog.New(slog.NewTextHandler(&logs, nil))
				got, err := detectResources(dir, tc.override+";disk:1024", log, hostProbes{procRoot: filepath.Join(dir, "proc"),
					bandwidth: func(string) (network.Bandwidth, error) { return network.Bandwidth{}, network.ErrNoDefaultRoute },
					memBound:  mon.MemoryLimit})
				if err != nil {
					t.Fatal(err)
				}
				if got.Mem() != tc.wantMem {
					t.Errorf("mem = %v MiB, want %v", got.Mem(), tc.wantMem)
				}
				if !strings.Contains(logs.String(), tc.log) {
					t.Errorf("log %q does not say %q", logs.String(), tc.log)
				}
			})
		}
	}
}
