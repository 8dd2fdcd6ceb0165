package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
)

// TestSliceKinds: the slices go in twos, or in fours with writer-alone
// slices (each measured slice after a frozen one), and the load generator pauses exactly in the writer-alone ones.
func TestSliceKinds(t *testing.T) {
	t.Parallel()
	want2 := []sliceKind{sliceAlone, sliceShared, sliceAlone, sliceShared}
	want3 := []sliceKind{sliceAlone, sliceShared, sliceAlone, sliceWriterAlone, sliceAlone, sliceShared, sliceAlone, sliceWriterAlone}
	for i, w := range want2 {
		if got := kindOf(i, false); got != w {
			t.Errorf("kindOf(%d, false) = %d, want %d", i, got, w)
		}
	}
	const slice = 2 * time.Second
	for i, w := range want3 {
		if got := kindOf(i, true); got != w {
			t.Errorf("kindOf(%d, true) = %d, want %d", i, got, w)
		}
		for _, at := range []time.Duration{time.Duration(i) * slice, time.Duration(i)*slice + slice - time.Millisecond} {
			if got, want := paused(at, slice, 4, 3), w == sliceWriterAlone; got != want {
				t.Errorf("paused(%v) = %v, want %v", at, got, want)
			}
		}
	}
	if paused(5*time.Second, slice, 0, 0) {
		t.Error("paused without a pattern")
	}
}

// TestIOShare: S is the rate beside over the rate alone, and the per-cycle
// ratios pair each shared window with the writer-alone window after it.
func TestIOShare(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	m := resourceMeter{ioShared: 6 * mib, ioAlone: 20 * mib, windows: []writeWindow{
		{Rate: 4 * mib}, {Alone: true, Rate: 16 * mib}, {Rate: 8 * mib}, {Alone: true, Rate: 24 * mib},
	}}
	s, what, err := ioShare(m)
	if err != nil || s != 0.3 {
		t.Fatalf("ioShare = %v, %v; want 0.3", s, err)
	}
	const want = "write rate 6.0 MiB/s beside the server (2 windows, min 4.0 median 6.0 max 8.0) / 20.0 MiB/s alone (2 windows, min 16.0 median 20.0 max 24.0); per cycle min 0.25 median 0.29 max 0.33"
	if what != want {
		t.Errorf("what =\n%s\nwant\n%s", what, want)
	}
	if s, _, _ := ioShare(resourceMeter{ioShared: mib}); s != 0 {
		t.Errorf("nothing written alone: S = %v, want 0", s)
	}
}

// TestCapLift: a writer-alone slice lifts the agent's cap and puts it back
// after; of a cap the agent sets within the slice and the lifted one, the
// lower is put back; with no cap or no disk, nothing is written.
func TestCapLift(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "rev"), 0o755); err != nil {
		t.Fatal(err)
	}
	ioMax := filepath.Join(dir, "rev", "io.max")
	write := func(v string) {
		t.Helper()
		if err := os.WriteFile(ioMax, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func() string {
		t.Helper()
		data, err := os.ReadFile(ioMax)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	c := &capLift{layout: cgroups.Layout{Mode: cgroups.ModeV2, Unified: dir}, rel: "rev", dev: "254:0"}
	write("254:0 rbps=1000 wbps=1000")
	if err := c.lift(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "254:0 rbps=max wbps=max" {
		t.Fatalf("lifted: io.max %q", got)
	}
	if err := c.restore(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "254:0 rbps=1000 wbps=1000" {
		t.Fatalf("restored: io.max %q", got)
	}
	// The agent sets a lower cap of its own within the slice: it stands.
	if err := c.lift(); err != nil {
		t.Fatal(err)
	}
	write("254:0 rbps=500 wbps=500")
	if err := c.restore(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "254:0 rbps=500 wbps=500" {
		t.Fatalf("the agent's lower cap overwritten: io.max %q", got)
	}
	// A higher one (its Throttle from no cap, which it only took because
	// the cap was lifted): the lifted cap is put back.
	if err := c.lift(); err != nil {
		t.Fatal(err)
	}
	write("254:0 rbps=2000 wbps=2000")
	if err := c.restore(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "254:0 rbps=500 wbps=500" {
		t.Fatalf("the agent's higher cap kept: io.max %q", got)
	}
	if c.Lifted != 3 || c.Recapped != 2 {
		t.Errorf("lifted %d recapped %d, want 3 and 2", c.Lifted, c.Recapped)
	}
	// The agent caps again within the slice, twice: hold lifts each, and
	// the lowest is put back at the end, being lower than the lifted one.
	write("254:0 rbps=400 wbps=400")
	if err := c.lift(); err != nil {
		t.Fatal(err)
	}
	for _, agentCap := range []string{"300", "350"} {
		write("254:0 rbps=" + agentCap + " wbps=" + agentCap)
		if err := c.hold(); err != nil {
			t.Fatal(err)
		}
		if got := read(); got != "254:0 rbps=max wbps=max" {
			t.Fatalf("held: io.max %q", got)
		}
	}
	if err := c.hold(); err != nil || read() != "254:0 rbps=max wbps=max" || c.Relifted != 2 {
		t.Fatalf("hold with no cap on: io.max %q, relifted %d, %v", read(), c.Relifted, err)
	}
	if err := c.restore(); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "254:0 rbps=300 wbps=300" {
		t.Fatalf("restored after hold: io.max %q, want the agent's lowest cap", got)
	}
	if c.Lifted != 4 || c.Recapped != 3 {
		t.Errorf("lifted %d recapped %d, want 4 and 3", c.Lifted, c.Recapped)
	}
	// Outside a lifted slice hold touches nothing.
	if err := c.hold(); err != nil || read() != "254:0 rbps=300 wbps=300" {
		t.Errorf("hold outside a slice: io.max %q, %v", read(), err)
	}
	// No cap: nothing lifted, nothing restored.
	write("254:0 rbps=max wbps=max")
	if err := c.lift(); err != nil {
		t.Fatal(err)
	}
	write("sentinel")
	if err := c.restore(); err != nil || read() != "sentinel" {
		t.Errorf("restore without a lifted cap wrote io.max (%q, %v)", read(), err)
	}
	if c.Lifted != 4 {
		t.Errorf("lifted %d, want 4: there was no cap to lift", c.Lifted)
	}
	// No cap at the slice's start, one from the agent within it: lifted
	// through the slice, the agent's put back after it.
	write("254:0 rbps=max wbps=max")
	if err := c.lift(); err != nil {
		t.Fatal(err)
	}
	write("254:0 rbps=250 wbps=250")
	if err := c.hold(); err != nil || read() != "254:0 rbps=max wbps=max" {
		t.Fatalf("held: io.max %q, %v", read(), err)
	}
	if err := c.restore(); err != nil || read() != "254:0 rbps=250 wbps=250" {
		t.Errorf("restored: io.max %q, %v, want the agent's cap", read(), err)
	}
	// No disk found: nothing read or written.
	none := &capLift{layout: cgroups.Layout{Mode: cgroups.ModeV2, Unified: dir}, rel: "missing"}
	if err := none.lift(); err != nil {
		t.Errorf("lift without a disk: %v", err)
	}
}

// TestSaturated: a run whose server fails over 1% of its requests alone is
// not valid.
func TestSaturated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		requests, errors int
		want             bool
	}{{0, 0, false}, {1000, 0, false}, {1000, 10, false}, {1000, 11, true}, {16000, 14185, true}} {
		if got := saturated(phase{Requests: c.requests, Errors: c.errors}); got != c.want {
			t.Errorf("saturated(%d errors of %d) = %v, want %v", c.errors, c.requests, got, c.want)
		}
	}
}

// TestNotCompeting: a run without QoS of a scenario bounding the node's
// memory is left out when the node's limit was never hit; a QoS run is
// not (keeping best-effort work under the limit is its aim), nor is a
// scenario that does not bound the node's memory.
func TestNotCompeting(t *testing.T) {
	t.Parallel()
	hits := func(n uint64) *uint64 { return &n }
	mib := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		config string
		hits   *uint64
		avail  *float64
		want   bool
	}{
		{"noop", hits(0), nil, true},
		{"noop", hits(0), mib(900), true},
		{"noop", hits(0), mib(pressedMiB + 1), true},
		{"noop", hits(0), mib(pressedMiB), false}, // pressed to the critical line
		{"noop", hits(0), mib(90), false},
		{"noop", hits(3), mib(900), false},
		{"noop", nil, nil, false},
		{"cpuset,interference,reclaim,diskio", hits(0), mib(900), false},
		{"cpuset,interference,reclaim,diskio", hits(5), nil, false},
	} {
		r := runResult{Config: c.config, NodeLimitHits: c.hits, NodeMinAvailableMiB: c.avail}
		if got := notCompeting(r); got != c.want {
			t.Errorf("notCompeting(%s, hits %v, available %v) = %v, want %v", c.config, c.hits, c.avail, got, c.want)
		}
	}
	results := []runResult{
		{Scenario: "memory", Config: "noop", NodeLimitHits: hits(0), Alone: phase{P99: 1}, Shared: phase{P99: 2}},
		{Scenario: "memory", Config: "noop", NodeLimitHits: hits(9), Alone: phase{P99: 1}, Shared: phase{P99: 3}},
	}
	if c := collect(results, "memory", "noop"); c.invalid != 1 || len(c.ratio) != 1 || c.ratio[0] != 3 {
		t.Errorf("collect = %d invalid, ratios %v; want 1 invalid, ratios [3]", c.invalid, c.ratio)
	}
}

func TestQueued(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p50  time.Duration
		rate int
		want bool
	}{
		{5 * time.Millisecond, 200, false},
		{20 * time.Millisecond, 200, false}, // four requests' spacing: the limit
		{21 * time.Millisecond, 200, true},
		{21 * time.Millisecond, 100, false},
		{35 * time.Millisecond, 400, true},
		{time.Second, 0, false}, // results written before the rate was recorded
	} {
		if got := queued(phase{P50: c.p50}, c.rate); got != c.want {
			t.Errorf("queued(p50 %v at %d/s) = %v, want %v", c.p50, c.rate, got, c.want)
		}
	}
}

// TestWrittenBytesOfOneDisk checks that the writers' bytes are counted on
// their disk only when one is named: a half of the split disk is a loop
// device over the whole disk's, and both count each write.
func TestWrittenBytesOfOneDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "v2", "rev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "v1", "rev"), 0o755); err != nil {
		t.Fatal(err)
	}
	v2 := "7:2 rbytes=0 wbytes=300 rios=0 wios=3\n7:0 rbytes=0 wbytes=300 rios=0 wios=3\n254:0 rbytes=4096 wbytes=50\n"
	v1 := "7:2 Read 0\n7:2 Write 300\n7:2 Total 300\n7:0 Write 300\n7:0 Total 300\n254:0 Write 50\nTotal 650\n"
	if err := os.WriteFile(filepath.Join(dir, "v2", "rev", "io.stat"), []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "v1", "rev", "blkio.throttle.io_service_bytes"), []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	layouts := map[string]cgroups.Layout{
		"v2":     {Mode: cgroups.ModeV2, Unified: filepath.Join(dir, "v2")},
		"hybrid": {Mode: cgroups.ModeHybrid, Blkio: filepath.Join(dir, "v1")},
	}
	for name, l := range layouts {
		for dev, want := range map[string]uint64{"": 650, "7:2": 300, "254:0": 50, "8:0": 0} {
			got, err := resourceMeter{layout: l, revocable: "rev", dev: dev}.writtenBytes()
			if err != nil {
				t.Fatalf("%s %q: %v", name, dev, err)
			}
			if got.bytes != want {
				t.Errorf("%s, dev %q: %d bytes written, want %d", name, dev, got.bytes, want)
			}
		}
	}
}
