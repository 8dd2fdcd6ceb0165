package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/resources"
)

// resourceMeter reads the revocable subtree's memory and disk writes. Its
// share function is called after the load.
type resourceMeter struct {
	layout    cgroups.Layout
	node      slacklinev1connect.NodeServiceClient
	revocable string
	// dev, when set ("MAJ:MIN"), is the writers' disk: writtenBytes
	// counts its bytes only (a loop device over another counts each
	// write on both).
	dev string
	// ioShared is best-effort writers' rate over the shared slices of the
	// load (bytes per second), ioAlone the same writers' rate over the
	// writer-alone slices, windows each slice's rate: set after the load
	// (the io scenario).
	ioShared, ioAlone float64
	// heldShared, when set, is the memory best-effort work held on average
	// over the shared slices (bytes): memoryShare's numerator instead of
	// what it holds after the load.
	heldShared float64
	windows    []writeWindow
}

type ioSample struct {
	at    time.Time
	bytes uint64
}

// heldBytes reads the memory the revocable subtree holds (v2
// memory.current, v1 memory.usage_in_bytes).
func (m resourceMeter) heldBytes() (uint64, error) {
	var file string
	if m.layout.Mode == cgroups.ModeV2 {
		file = filepath.Join(m.layout.Unified, m.revocable, "memory.current")
	} else {
		file = filepath.Join(m.layout.Memory, m.revocable, "memory.usage_in_bytes")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	held, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", file, err)
	}
	return held, nil
}

// waitHeld waits until best-effort work holds want bytes (97% of it: the
// tasks' own pages are not all counted alike in v1 and v2), at most
// timeout; then it says how much it held and the run goes on (a QoS set
// that throttles best-effort CPU on a loaded host may keep it from ever
// filling: S shows it).
func waitHeld(m resourceMeter, want uint64, timeout time.Duration) error {
	start := time.Now()
	var held uint64
	for time.Since(start) < timeout {
		var err error
		if held, err = m.heldBytes(); err != nil {
			return err
		}
		if held >= want/100*97 {
			fmt.Printf("   best-effort work holds %d MiB after %v\n", held>>20, time.Since(start).Round(time.Second))
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Printf("   best-effort work holds %d MiB of %d MiB after %v: measuring it still filling\n", held>>20, want>>20, timeout)
	return nil
}

// memoryShare is the memory best-effort work holds (the revocable subtree's
// charged memory) over the memory slack the agent offers (its revocable mem
// estimate): S of the memory scenario, measured after the load.
func memoryShare(m resourceMeter) (float64, string, error) {
	heldBytes, err := m.heldBytes()
	if err != nil {
		return 0, "", err
	}
	held, what := float64(heldBytes), "memory held"
	if m.heldShared > 0 {
		held, what = m.heldShared, "memory held on average beside the server"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	est, err := m.node.GetEstimate(ctx, connect.NewRequest(&slacklinev1.GetEstimateRequest{}))
	if err != nil {
		return 0, "", err
	}
	reg, rev, err := resources.FromProto(est.Msg.GetRevocable())
	if err != nil {
		return 0, "", err
	}
	slack := reg.Add(rev).Mem() * (1 << 20) // the estimate's resources are marked revocable

	if slack <= 0 {
		return 0, "memory held / memory slack (no slack offered)", nil
	}
	return held / slack, fmt.Sprintf("%s %.0f MiB / memory slack %.0f MiB", what, held/(1<<20), slack/(1<<20)), nil
}

// ioShare is best-effort writers' rate over the shared slices (beside the
// loaded server, under the agent's QoS) over the rate of the same writer
// processes over the writer-alone slices of the same cycles (the load
// paused, the agent's cap lifted for the slice): S of the io scenario. Both rates come from slices a few seconds apart, so a shared
// disk's background load touches both alike; the text gives each window's
// spread and the per-cycle ratios' (a shared slice over the writer-alone
// slice after it).
func ioShare(m resourceMeter) (float64, string, error) {
	if m.ioAlone <= 0 {
		return 0, "write rate beside the server / alone (nothing written alone)", nil
	}
	var beside, alone, cycles []float64
	for i, w := range m.windows {
		if w.Alone {
			alone = append(alone, w.Rate/(1<<20))
			if i > 0 && !m.windows[i-1].Alone && w.Rate > 0 {
				cycles = append(cycles, m.windows[i-1].Rate/w.Rate)
			}
		} else {
			beside = append(beside, w.Rate/(1<<20))
		}
	}
	return m.ioShared / m.ioAlone, fmt.Sprintf("write rate %.1f MiB/s beside the server (%d windows, %s) / %.1f MiB/s alone (%d windows, %s); per cycle %s",
		m.ioShared/(1<<20), len(beside), minMedMax(beside, "%.1f"), m.ioAlone/(1<<20), len(alone), minMedMax(alone, "%.1f"), minMedMax(cycles, "%.2f")), nil
}

// minMedMax formats the minimum, median and maximum of vs.
func minMedMax(vs []float64, format string) string {
	if len(vs) == 0 {
		return "none"
	}
	s := slices.Sorted(slices.Values(vs))
	f := func(v float64) string { return fmt.Sprintf(format, v) }
	return "min " + f(s[0]) + " median " + f(median(s)) + " max " + f(s[len(s)-1])
}

// warmWriters thaws the writers of every cgroup in rels and waits until each
// cgroup has written want bytes, at most timeout (then it says how far they
// got and the run goes on).
func warmWriters(l cgroups.Layout, rels []string, dev string, want uint64, timeout time.Duration) error {
	start := time.Now()
	for _, rel := range rels {
		if err := freezeCgroup(l, rel, false); err != nil {
			return err
		}
	}
	written := make([]uint64, len(rels))
	for {
		warm := true
		for i, rel := range rels {
			w, err := resourceMeter{layout: l, revocable: rel, dev: dev}.writtenBytes()
			if err != nil {
				return err
			}
			written[i] = w.bytes
			warm = warm && w.bytes >= want
		}
		if warm || time.Since(start) > timeout {
			fmt.Printf("   writers warm (MiB written by %v: %v) after %v\n", rels, mibs(written), time.Since(start).Round(time.Second))
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func mibs(bs []uint64) []uint64 {
	out := make([]uint64, len(bs))
	for i, b := range bs {
		out[i] = b >> 20
	}
	return out
}

// freezeCgroup freezes or thaws the cgroup rel. Freezing works in the v2
// tree, present on hybrid hosts too (the freezer is part of cgroup v2's
// core, no controller needed).
func freezeCgroup(l cgroups.Layout, rel string, frozen bool) error {
	v := "0"
	if frozen {
		v = "1"
	}
	return os.WriteFile(filepath.Join(l.Unified, rel, "cgroup.freeze"), []byte(v), 0)
}

// writtenBytes reads the revocable subtree's cumulative disk writes: v2
// io.stat wbytes, v1 blkio.throttle.io_service_bytes Write (direct I/O
// only: v1 charges buffered writeback to the root), on m.dev if set.
func (m resourceMeter) writtenBytes() (ioSample, error) {
	s := ioSample{at: time.Now()}
	if m.layout.Mode == cgroups.ModeV2 {
		data, err := os.ReadFile(filepath.Join(m.layout.Unified, m.revocable, "io.stat"))
		if err != nil {
			return s, err
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || m.dev != "" && f[0] != m.dev {
				continue
			}
			for _, f := range f[1:] {
				if v, ok := strings.CutPrefix(f, "wbytes="); ok {
					n, _ := strconv.ParseUint(v, 10, 64)
					s.bytes += n
				}
			}
		}
		return s, nil
	}
	if m.layout.Blkio == "" {
		return s, errors.New("no blkio hierarchy: the io scenario cannot measure writes")
	}
	data, err := os.ReadFile(filepath.Join(m.layout.Blkio, m.revocable, "blkio.throttle.io_service_bytes"))
	if err != nil {
		return s, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[1] == "Write" && (m.dev == "" || f[0] == m.dev) {
			n, _ := strconv.ParseUint(f[2], 10, 64)
			s.bytes += n
		}
	}
	return s, nil
}

// capLift lifts the agent's cap on the revocable subtree's disk I/O for
// the writer-alone slices and puts it back after each, so that the
// writers' rate alone is their rate with neither the server nor the cap
// (the rate the controller reaches when the server stays idle: it lifts
// its cap after a calm period). The agent, reading no cap meanwhile, may
// cap anew from the start value (its Throttle from no cap) where it would
// have kept or halved the lifted cap: restore then puts back the lower of
// the two. It may also learn the writers' rate alone as the disk's rate,
// as it does whenever revocable I/O runs uncapped. An agent that caps
// revocable I/O from the start on a node whose guaranteed work does disk
// I/O (#28: the server fsynced a slice ago) puts a cap back within the
// slice: hold, called through the slice, lifts it again and keeps the
// lowest such cap for restore, so that the writers' rate alone stays an
// uncapped one (Relifted counts those lifts).
type capLift struct {
	mu     sync.Mutex
	layout cgroups.Layout
	rel    string // the revocable subtree
	dev    string // the capped disk, "MAJ:MIN" ("": none found, nothing lifted)
	held   bool   // within a writer-alone slice: from lift to restore
	saved  uint64 // the cap lifted (bytes per second), 0: none
	agent  uint64 // the lowest cap the agent set within the slice (hold), 0: none
	// Lifted counts the slices whose cap was lifted, Recapped those in
	// which the agent set a cap of its own meanwhile, Relifted the caps
	// hold lifted again within a slice.
	Lifted, Recapped, Relifted int
}

// hold lifts a cap the agent set within a lifted slice, remembering it
// (the lowest) for restore.
func (c *capLift) hold() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.held {
		return nil
	}
	cur, err := c.layout.IOLimit(c.rel, c.dev)
	if err != nil || cur == 0 {
		return err
	}
	if c.agent == 0 || cur < c.agent {
		c.agent = cur
	}
	c.Relifted++
	return c.layout.SetIOLimit(c.rel, []string{c.dev}, 0)
}

// lift removes the cap, remembering it.
func (c *capLift) lift() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dev == "" {
		return nil
	}
	c.held = true
	cur, err := c.layout.IOLimit(c.rel, c.dev)
	if err != nil || cur == 0 {
		return err
	}
	c.saved = cur
	c.Lifted++
	return c.layout.SetIOLimit(c.rel, []string{c.dev}, 0)
}

// restore puts the lifted cap back, or the agent's if it set a lower one
// meanwhile.
func (c *capLift) restore() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	saved, agent := c.saved, c.agent
	c.saved, c.agent, c.held = 0, 0, false
	if saved == 0 && agent == 0 {
		return nil // nothing lifted: a cap on now is the agent's
	}
	cur, err := c.layout.IOLimit(c.rel, c.dev)
	if err != nil {
		return err
	}
	// The agent's lowest cap within the slice: the one on now, or one
	// that hold lifted.
	lowest := cur
	if lowest == 0 || agent != 0 && agent < lowest {
		lowest = agent
	}
	want := lowest
	if lowest != 0 {
		c.Recapped++
	}
	if saved != 0 && (want == 0 || saved < want) {
		want = saved
	}
	if want == cur {
		return nil
	}
	return c.layout.SetIOLimit(c.rel, []string{c.dev}, want)
}

// diskOf returns the whole disk ("MAJ:MIN") holding dir, as the agent finds
// its sandboxes' (the device the agent caps).
func diskOf(dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", err
	}
	if unix.Major(st.Dev) == 0 {
		return "", fmt.Errorf("%s is on a file system without a block device", dir)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	block := filepath.Join("/sys/dev/block", dev)
	if _, err := os.Stat(filepath.Join(block, "partition")); err == nil {
		parent, err := os.ReadFile(filepath.Join(block, "..", "dev"))
		if err != nil {
			return "", fmt.Errorf("disk of partition %s: %w", dev, err)
		}
		dev = strings.TrimSpace(string(parent))
	}
	return dev, nil
}

// diskProbe measures the disk's write rate for the io writers' command run
// at normal CPU priority: started by the benchmark in a cgroup of its own
// (rel, for its disk counter; no CPU setting), warmed by warm bytes, then
// metered for d. Best-effort writers at idle CPU priority reach it only
// when they get the CPU they need; on a host whose CPUs other tenants keep
// busy they get a fraction, and their rate (and S) is then the CPU's, not
// the disk's: the run says so.
func diskProbe(l cgroups.Layout, rel, dev, dir, command string, warm uint64, d time.Duration) (float64, error) {
	dirs := []string{filepath.Join(l.Unified, rel)}
	if l.Mode != cgroups.ModeV2 && l.Blkio != "" {
		dirs = append(dirs, filepath.Join(l.Blkio, rel))
	}
	var procs []string
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			return 0, fmt.Errorf("disk probe cgroup: %w", err)
		}
		procs = append(procs, filepath.Join(d, "cgroup.procs"))
	}
	c := exec.Command("/bin/sh", append([]string{"-c", `for f; do echo $$ > "$f" || exit 1; done; exec ` + command, "sh"}, procs...)...)
	c.Dir = dir
	c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	defer func() {
		for _, d := range slices.Backward(dirs) {
			for deadline := time.Now().Add(10 * time.Second); syscall.Rmdir(d) == syscall.EBUSY && time.Now().Before(deadline); {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	if err := c.Start(); err != nil {
		return 0, err
	}
	defer func() {
		_ = c.Process.Kill()
		_ = c.Wait()
	}()
	m := resourceMeter{layout: l, revocable: rel, dev: dev}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		w, err := m.writtenBytes()
		if err != nil {
			return 0, err
		}
		if w.bytes >= warm {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("disk probe: %d of %d bytes written in a minute", w.bytes, warm)
		}
	}
	s0, err := m.writtenBytes()
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	s1, err := m.writtenBytes()
	if err != nil {
		return 0, err
	}
	return float64(s1.bytes-s0.bytes) / s1.at.Sub(s0.at).Seconds(), nil
}

// nodeLimitHits reads how often the node cgroup rel (nodecgroup.Make) hit
// its memory limit: v2 memory.events "max", v1 memory.failcnt.
func nodeLimitHits(l cgroups.Layout, rel string) (uint64, error) {
	if l.Mode == cgroups.ModeV2 {
		file := filepath.Join(l.Unified, rel, "memory.events")
		if v, ok := statField(file, "max"); ok {
			return v, nil
		}
		return 0, fmt.Errorf("no max in %s", file)
	}
	file := filepath.Join(l.Memory, rel, "memory.failcnt")
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", file, err)
	}
	return v, nil
}

// nodeAvailable is what the node cgroup rel (nodecgroup.Make, whose limit
// is limit bytes) has available as the agent's monitor reckons it: the
// limit less its charged memory net of inactive page cache (v2
// memory.current and memory.stat inactive_file, v1 memory.usage_in_bytes
// and total_inactive_file).
func nodeAvailable(l cgroups.Layout, rel string, limit uint64) (uint64, error) {
	dir, usageFile, inactiveKey := filepath.Join(l.Unified, rel), "memory.current", "inactive_file"
	if l.Mode != cgroups.ModeV2 {
		dir, usageFile, inactiveKey = filepath.Join(l.Memory, rel), "memory.usage_in_bytes", "total_inactive_file"
	}
	data, err := os.ReadFile(filepath.Join(dir, usageFile))
	if err != nil {
		return 0, err
	}
	usage, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", usageFile, err)
	}
	inactive, _ := statField(filepath.Join(dir, "memory.stat"), inactiveKey)
	used := usage - min(usage, inactive)
	return limit - min(limit, used), nil
}
