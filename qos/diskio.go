package qos

import (
	"errors"
	"fmt"
	"time"
)

// DiskIOConfig configures the disk I/O controller. Guaranteed work's disk
// I/O is delayed when a guaranteed or protected container's synchronous
// writes (fsync, fdatasync, O_SYNC: eBPF) had a p99 over SyncP99Enter in
// the last sampling interval, counting at least MinSyncs of them; or its
// own block requests (eBPF) a p99 over BlockP99Enter, counting at least
// MinBlockIOs; or either p99 over StallEnter however few completed; or its
// io.pressure some avg10 exceeds SomeEnter or full avg10 exceeds FullEnter;
// or the node's /proc/pressure/io full avg10 exceeds NodeFullEnter (0, the
// default, ignores it: the node's figure counts revocable work's own
// throttled I/O). Calm when every one is below half its threshold.
//
// The sync latency is the signal that sees a database's commits: on ext4
// an fsync mostly waits for the journal commit (jbd2), a wait io.pressure
// does not count (it is not an I/O sleep of the task), so a guaranteed
// task's p99 can grow tenfold while its io.pressure stays under 10%.
type DiskIOConfig struct {
	SomeEnter, FullEnter, NodeFullEnter float64
	// SyncP99Enter is the p99 synchronous-write latency of a guaranteed
	// container above which its I/O is delayed (default 20 ms; 0 ignores
	// the signal), over at least MinSyncs writes in the interval (default
	// 10: fewer make the p99 the maximum of a handful).
	SyncP99Enter time.Duration
	MinSyncs     uint64
	// SyncRatioEnter makes the fsync signal relative as well: a guaranteed
	// container's fsync p99 over SyncRatioEnter times its quiet p99 (its
	// fsync p99 over intervals in which revocable work wrote nothing,
	// averaged with weight SyncQuietWeight; unknown until such an
	// interval) delays revocable I/O, when that is at least SyncP99Min;
	// calm below 1 + (SyncRatioEnter-1)/2 times the quiet p99 (default 2,
	// 2 ms, 0.25; 0 ignores the relative signal). A fast disk's fsync
	// can triple beside a writer (1 to 3-5 ms on the benchmark's modelled
	// disk) without reaching an absolute threshold that suits a cloud
	// volume (25 ms), and a service that commits in turn saturates at
	// the tripled figure.
	SyncRatioEnter  float64
	SyncP99Min      time.Duration
	SyncQuietWeight float64
	// BlockP99Enter is the p99 latency of a guaranteed container's own
	// block requests (eBPF: submission to completion, queueing behind
	// revocable I/O included) above which its I/O is delayed (default
	// 20 ms; 0 ignores the signal), over at least MinBlockIOs requests in
	// the interval (default 10).
	BlockP99Enter time.Duration
	MinBlockIOs   uint64
	// StallEnter is the fsync or block request p99 of a guaranteed
	// container above which its I/O is delayed however few completed in
	// the interval (at least one; default 100 ms; 0: only the counted
	// signals above). A stall hides from the counted signals: while the
	// writes it delays take a second each, fewer than MinSyncs complete
	// in any interval (the colocation bench's fsync server, 200 a second,
	// saw 1.1-1.5 s fsyncs beside uncapped writers for 2 s while the
	// controller waited for 10 of them; its first throttle came 11.6 s
	// into the load). A stall also sends the cap to the floor at once,
	// not by halving steps DecreaseInterval apart, once the floor is a
	// share of a known disk rate (not FloorBytesPerSecond alone).
	StallEnter time.Duration
	// StartBytesPerSecond is the cap of the first Throttle when there is
	// none, per device: the node's disk capacity (Node.DiskBytesPerSecond)
	// when known, else this (default 256 MiB/s). Raising the cap to it
	// again removes it.
	StartBytesPerSecond float64
	// DecreaseFactor multiplies the cap at each Throttle, at most once per
	// DecreaseInterval (io.pressure avg10 needs seconds to show one), down
	// to the floor: FloorFraction of the disk rate (DiskBytesPerSecond,
	// else Node.DiskBytesPerSecond, else the highest rate revocable work
	// reached, at most the cap where capped, learned from
	// Input.RevocableIOBytes) and at least FloorBytesPerSecond, so that
	// revocable I/O keeps a share of the disk rather than stalling (default
	// 0.5, 2 s, 35%, 1 MiB/s).
	DecreaseFactor      float64
	DecreaseInterval    time.Duration
	FloorFraction       float64
	FloorBytesPerSecond float64
	// After CalmPeriod of calm the cap rises by IncreaseFraction of the
	// disk rate (or of the start value where it is unknown) every
	// IncreaseInterval (default 5 s, 10%, 1 s).
	CalmPeriod       time.Duration
	IncreaseFraction float64
	IncreaseInterval time.Duration
	// RequestKiB is the disk's largest request (queue/max_sectors_kb)
	// while revocable I/O is capped: every Throttle and every Unthrottle
	// that keeps a cap carries it (Correction.IORequestKiB), the
	// Unthrottle that removes the cap carries 0 (the device's own size
	// back). A guaranteed fsync waits, at each of its steps, behind the
	// revocable command the disk is serving; blk-throttle paces bios but
	// a released bio is split into requests of max_sectors_kb (1280 KiB
	// by default: 10 ms at 128 MiB/s), so the cap lowers how many fsyncs
	// wait and this lowers how long each waits. Default 32 KiB (0.25 ms at
	// 128 MiB/s); 0 leaves the size alone. The cost is more commands for
	// the same bytes while capped, for every cgroup on the disk.
	RequestKiB uint64
	// GuardedStartFraction makes revocable I/O start capped on a node
	// whose guaranteed work does disk I/O (a guaranteed or protected
	// container's fsyncs or block requests, eBPF, within GuardedIOWindow):
	// with no cap on, the controller caps it at this fraction of the disk
	// rate (DiskBytesPerSecond, else the node's, else the highest rate
	// revocable I/O reached, else StartBytesPerSecond), at least the floor, before any
	// signal, and raises it only while guaranteed I/O stays calm and
	// revocable I/O uses the cap (IncreaseUseFraction), as TCP's slow
	// start does. What a writer queues below the disk before a first
	// throttle (the device's queue, the disk's own) drains at the disk's
	// rate with the guaranteed fsyncs waiting behind it, so a reaction,
	// however fast, comes after the harm (the colocation bench: the first
	// shared slice's p99 0.3-0.6 s with the cap at its floor 1.3 s into
	// the load). While guaranteed I/O is seen the cap rises to the disk
	// rate at most and is not removed (removing it would start the
	// backlog again); GuardedIOWindow after the last guaranteed I/O the
	// usual rise removes it. A cap taken off from outside (by hand) is put
	// back at most once per DecreaseInterval. Default 0.35 (the floor's
	// share); 0 turns it off (revocable I/O starts uncapped).
	GuardedStartFraction float64
	// GuardedIOWindow is how long after a guaranteed container's last
	// fsync or block request the node counts as one whose guaranteed work
	// does disk I/O (default 5 min: a database idle between bursts of
	// commits keeps its protection).
	GuardedIOWindow time.Duration
	// IncreaseUseFraction holds the cap's rise until revocable I/O used at
	// least this fraction of the cap over its latest rate interval (at
	// least minRateInterval): a cap that nothing tested, writers frozen
	// or idle, is not raised by the calm it did not cause (TCP's
	// congestion window validation, RFC 7661). Where the revocable I/O
	// counter is unknown the rise is not held. Default 0.5; 0 turns it
	// off.
	IncreaseUseFraction float64
	// DiskBytesPerSecond is the disk's rate as the operator knows it
	// (bytes per second; 0: unknown, then the node's estimate or the
	// highest rate revocable I/O reached), from which the start cap, the floor and the
	// rise's step are taken.
	DiskBytesPerSecond float64
}

// DefaultDiskIOConfig returns the disk I/O controller's defaults.
func DefaultDiskIOConfig() DiskIOConfig {
	return DiskIOConfig{
		SomeEnter: 10, FullEnter: 5, SyncP99Enter: 20 * time.Millisecond, MinSyncs: 10,
		SyncRatioEnter: 2, SyncP99Min: 2 * time.Millisecond, SyncQuietWeight: 0.25,
		BlockP99Enter: 20 * time.Millisecond, MinBlockIOs: 10, StallEnter: 100 * time.Millisecond,
		StartBytesPerSecond: 256 << 20,
		DecreaseFactor:      0.5, DecreaseInterval: 2 * time.Second, FloorFraction: 0.35, FloorBytesPerSecond: 1 << 20,
		CalmPeriod: 5 * time.Second, IncreaseFraction: 0.1, IncreaseInterval: time.Second,
		RequestKiB:           32,
		GuardedStartFraction: 0.35, GuardedIOWindow: 5 * time.Minute, IncreaseUseFraction: 0.5,
	}
}

func (c DiskIOConfig) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("diskio "+format, args...)) }
	for name, v := range map[string]float64{"some enter": c.SomeEnter, "full enter": c.FullEnter, "node full enter": c.NodeFullEnter} {
		if v < 0 || v > 100 {
			bad("%s must be a percentage in [0, 100], got %v", name, v)
		}
	}
	if c.SyncP99Enter < 0 {
		bad("sync p99 enter must not be negative, got %v", c.SyncP99Enter)
	}
	if c.SyncRatioEnter != 0 && !(c.SyncRatioEnter > 1) {
		bad("sync ratio enter must be over 1 (or 0: off), got %v", c.SyncRatioEnter)
	}
	if c.SyncP99Min < 0 {
		bad("sync p99 min must not be negative, got %v", c.SyncP99Min)
	}
	if c.SyncRatioEnter != 0 && !(c.SyncQuietWeight > 0 && c.SyncQuietWeight <= 1) {
		bad("sync quiet weight must be in (0, 1], got %v", c.SyncQuietWeight)
	}
	if c.BlockP99Enter < 0 {
		bad("block p99 enter must not be negative, got %v", c.BlockP99Enter)
	}
	if c.StallEnter < 0 {
		bad("stall enter must not be negative, got %v", c.StallEnter)
	}
	if !(c.StartBytesPerSecond > 0) {
		bad("start bytes per second must be positive, got %v", c.StartBytesPerSecond)
	}
	if !(c.DecreaseFactor > 0 && c.DecreaseFactor < 1) {
		bad("decrease factor must be in (0, 1), got %v", c.DecreaseFactor)
	}
	if !(c.FloorFraction >= 0 && c.FloorFraction < 1) {
		bad("floor fraction must be in [0, 1), got %v", c.FloorFraction)
	}
	if !(c.FloorBytesPerSecond > 0) {
		bad("floor bytes per second must be positive (a zero cap would stall revocable I/O), got %v", c.FloorBytesPerSecond)
	}
	if !(c.IncreaseFraction > 0 && c.IncreaseFraction <= 1) {
		bad("increase fraction must be in (0, 1], got %v", c.IncreaseFraction)
	}
	if !(c.GuardedStartFraction >= 0 && c.GuardedStartFraction <= 1) {
		bad("guarded start fraction must be in [0, 1] (0: off), got %v", c.GuardedStartFraction)
	}
	if c.GuardedStartFraction > 0 && c.GuardedIOWindow <= 0 {
		bad("guarded I/O window must be positive, got %v", c.GuardedIOWindow)
	}
	if !(c.IncreaseUseFraction >= 0 && c.IncreaseUseFraction <= 1) {
		bad("increase use fraction must be in [0, 1] (0: off), got %v", c.IncreaseUseFraction)
	}
	if c.DiskBytesPerSecond < 0 {
		bad("disk bytes per second must not be negative (0: unknown), got %v", c.DiskBytesPerSecond)
	}
	if c.RequestKiB != 0 && c.RequestKiB < 4 {
		bad("request KiB must be at least 4 (a page; 0: leave the disk's request size alone), got %d", c.RequestKiB)
	}
	for name, d := range map[string]time.Duration{"decrease interval": c.DecreaseInterval, "calm period": c.CalmPeriod, "increase interval": c.IncreaseInterval} {
		if d <= 0 {
			bad("%s must be positive, got %v", name, d)
		}
	}
	return errors.Join(errs...)
}

// DiskIOController is the "diskio" controller: multiplicative decrease,
// additive increase (AIMD) of the revocable subtree's per-device I/O cap
// (Throttle and Unthrottle of DiskIO), driven by guaranteed work's fsync
// latency and io.pressure, with a floor that leaves revocable work a share
// of the disk. It does nothing where the node cannot cap (Node.DiskIO
// false), and never kills: a capped writer only waits.
//
// State: the times of the latest change and the latest Throttle, when calm
// began, and the disk rate it learned: the highest rate of revocable I/O
// over an interval, at most the cap where it was capped (the previous
// counter and time, and the cap then). The applied cap is read from
// Input.RevocableIOLimit each time.
type DiskIOController struct {
	cfg       DiskIOConfig
	changed   time.Time // the latest change
	decreased time.Time // the latest Throttle
	calmFrom  time.Time

	lastBytes uint64
	lastAt    time.Time
	lastLimit float64 // the cap at lastAt, 0: none
	learned   float64 // bytes per second: revocable I/O's highest rate (learn)
	// rate is revocable I/O's rate over the latest interval of at least
	// minRateInterval, capped or not; rateKnown whether there is one.
	rate      float64
	rateKnown bool

	// guardedAt is when a guaranteed container's fsync or block request
	// was last seen, guardedBy which container and what.
	guardedAt time.Time
	guardedBy string

	// quiet is each guaranteed container's fsync p99 over intervals in
	// which revocable work wrote nothing (a moving average), pruned to
	// the containers of the latest input, at most maxQuietSyncs.
	quiet     map[string]time.Duration
	prevBytes uint64 // the revocable counter at the previous evaluation
	prevSeen  bool
	// quietOverLimit counts the containers not learned because quiet
	// held maxQuietSyncs already, once per evaluation each.
	quietOverLimit uint64
}

// maxQuietSyncs bounds the quiet fsync p99s kept: containers beyond it
// (a node runs far fewer) are judged by the absolute threshold only, and
// counted (QuietSyncsOverLimit).
const maxQuietSyncs = 4096

// QuietSyncsOverLimit returns how many times a guaranteed container's quiet
// fsync p99 was not learned because the controller kept maxQuietSyncs of
// them already (once per container and evaluation). It only grows.
func (d *DiskIOController) QuietSyncsOverLimit() uint64 { return d.quietOverLimit }

// QuietSyncsOverLimit returns the sum of DiskIOController.QuietSyncsOverLimit
// over the disk I/O controllers in c (a controller from NewSet or
// Registry): 0 when there is none.
func QuietSyncsOverLimit(c Controller) uint64 {
	switch c := c.(type) {
	case *DiskIOController:
		return c.QuietSyncsOverLimit()
	case *set:
		var n uint64
		for _, m := range c.controllers {
			n += QuietSyncsOverLimit(m)
		}
		return n
	}
	return 0
}

// minRateInterval is the shortest interval over which the controller
// takes a rate of revocable I/O: shorter ones magnify a burst.
const minRateInterval = 500 * time.Millisecond

// NewDiskIO returns a disk I/O controller.
func NewDiskIO(cfg DiskIOConfig) *DiskIOController { return &DiskIOController{cfg: cfg} }

// learn updates the learned disk rate from the revocable subtree's I/O
// counter: the highest rate over an interval, at most the higher cap at
// its ends where either end was capped (a rate over the cap is a burst of
// bytes counted late, not the disk). A rate under a cap is a lower bound
// of the disk's: on a node where revocable I/O starts capped
// (GuardedStartFraction) it never runs uncapped, and the floor is still a
// share of what it reached.
func (d *DiskIOController) learn(in Input) {
	limit := max(in.RevocableIOLimit, 0)
	if in.RevocableIOBytes == 0 {
		return
	}
	if !d.lastAt.IsZero() && in.RevocableIOBytes >= d.lastBytes {
		dt := in.Now.Sub(d.lastAt)
		if dt < minRateInterval {
			return // keep the older sample: the interval is still too short
		}
		d.rate, d.rateKnown = float64(in.RevocableIOBytes-d.lastBytes)/dt.Seconds(), true
		taught := d.rate
		if d.lastLimit > 0 || limit > 0 {
			taught = min(taught, max(d.lastLimit, limit))
		}
		d.learned = max(d.learned, taught)
	}
	d.lastBytes, d.lastAt, d.lastLimit = in.RevocableIOBytes, in.Now, limit
}

// learnQuiet updates each guaranteed container's quiet fsync p99 from an
// interval in which the revocable subtree's write counter did not move
// (revocable work wrote nothing: frozen, idle or not there), and forgets
// the containers no longer in the input.
func (d *DiskIOController) learnQuiet(in Input) {
	if d.cfg.SyncRatioEnter == 0 {
		return
	}
	// A counter still at 0 says nothing: no revocable I/O yet, or no
	// counter at all.
	idle := d.prevSeen && in.RevocableIOBytes > 0 && in.RevocableIOBytes == d.prevBytes
	d.prevBytes, d.prevSeen = in.RevocableIOBytes, true
	if d.quiet == nil {
		d.quiet = make(map[string]time.Duration)
	}
	present := make(map[string]bool, len(in.Containers))
	for i := range in.Containers {
		c := &in.Containers[i]
		present[c.ID] = true
		if !idle || !c.guarded() || c.Syncs < max(d.cfg.MinSyncs, 1) || c.SyncP99 <= 0 {
			continue
		}
		q, ok := d.quiet[c.ID]
		switch {
		case ok:
			d.quiet[c.ID] = q + time.Duration(d.cfg.SyncQuietWeight*float64(c.SyncP99-q))
		case len(d.quiet) < maxQuietSyncs:
			d.quiet[c.ID] = c.SyncP99
		default:
			d.quietOverLimit++
		}
	}
	for id := range d.quiet {
		if !present[id] {
			delete(d.quiet, id)
		}
	}
}

// guardedIO records the guaranteed containers' disk I/O of this input
// and reports whether any was seen within GuardedIOWindow.
func (d *DiskIOController) guardedIO(in Input) bool {
	for i := range in.Containers {
		c := &in.Containers[i]
		if !c.guarded() || c.Syncs == 0 && c.BlockIOs == 0 {
			continue
		}
		d.guardedAt = in.Now
		d.guardedBy = fmt.Sprintf("%s does disk I/O (%d fsyncs, %d block requests in its latest interval)", c.ID, c.Syncs, c.BlockIOs)
		break
	}
	return d.cfg.GuardedStartFraction > 0 && !d.guardedAt.IsZero() && in.Now.Sub(d.guardedAt) < d.cfg.GuardedIOWindow
}

// disk returns the disk's rate as known (configured, the node's, or
// learned; 0: unknown) and what it is.
func (d *DiskIOController) disk(in Input) (float64, string) {
	switch {
	case d.cfg.DiskBytesPerSecond > 0:
		return d.cfg.DiskBytesPerSecond, "the configured disk rate"
	case in.Node.DiskBytesPerSecond > 0:
		return in.Node.DiskBytesPerSecond, "the node's disk rate"
	}
	return d.learned, "the highest rate revocable I/O reached"
}

// rates returns the start of the cap (the disk rate when known, else
// StartBytesPerSecond), its floor, and where the floor comes from.
func (d *DiskIOController) rates(in Input) (start, floor float64, why string) {
	disk, what := d.disk(in)
	start, floor, why = d.cfg.StartBytesPerSecond, d.cfg.FloorBytesPerSecond, "the floor"
	if disk > 0 && d.cfg.FloorFraction*disk > floor {
		floor, why = d.cfg.FloorFraction*disk, fmt.Sprintf("the floor: %.0f%% of %s %s", 100*d.cfg.FloorFraction, what, formatRateBytes(disk))
	}
	if disk > 0 {
		start = disk
	}
	return start, min(floor, start), why
}

// Evaluate implements Controller.
func (d *DiskIOController) Evaluate(in Input) []Correction {
	if !in.Node.DiskIO {
		return nil
	}
	d.learn(in)
	d.learnQuiet(in)
	guarded := d.guardedIO(in)
	signal, at, stall := d.pressure(in, 1)
	limit := in.RevocableIOLimit
	start, floor, floorWhy := d.rates(in)
	if signal == "" && limit <= 0 && guarded {
		return d.startCapped(in, start, floor, floorWhy)
	}
	if signal != "" {
		d.calmFrom = time.Time{}
		if !d.decreased.IsZero() && (in.Now.Sub(d.decreased) < d.cfg.DecreaseInterval || !at.After(d.changed)) {
			return nil // too soon, or a sample from before the latest change (which it cannot show)
		}
		from := limit
		if from <= 0 {
			from = start
		}
		next := max(from*d.cfg.DecreaseFactor, floor)
		if disk, _ := d.disk(in); stall && disk > 0 {
			next = floor // a share of a known rate; else halving steps from the start
		}
		if limit > 0 && next >= limit {
			return nil // at the floor
		}
		d.changed, d.decreased = in.Now, in.Now
		return []Correction{{Kind: Throttle, Resource: DiskIO, IOLimit: next, IORequestKiB: d.cfg.RequestKiB, Controller: "diskio", Signal: at,
			Reason: fmt.Sprintf("%s; revocable disk I/O cap %s%s%s", signal, formatRateBytes(next), floorNote(next, floor, floorWhy), d.requestNote())}}
	}
	if calm, _, _ := d.pressure(in, 0.5); calm != "" || limit <= 0 {
		d.calmFrom = time.Time{}
		return nil
	}
	if d.calmFrom.IsZero() {
		d.calmFrom = in.Now
	}
	if in.Now.Sub(d.calmFrom) < d.cfg.CalmPeriod || (!d.changed.IsZero() && in.Now.Sub(d.changed) < d.cfg.IncreaseInterval) {
		return nil
	}
	if d.cfg.IncreaseUseFraction > 0 && d.rateKnown && d.rate < d.cfg.IncreaseUseFraction*limit {
		return nil // the cap was not tested: its calm says nothing
	}
	next, request, note := limit+d.cfg.IncreaseFraction*start, d.cfg.RequestKiB, ""
	switch {
	case next >= start && guarded:
		if limit >= start {
			return nil // the disk's rate: as high as it goes while guaranteed work does I/O
		}
		next, note = start, "; the disk's rate, kept while guaranteed work does disk I/O"
	case next >= start:
		next, request = 0, 0
		if d.cfg.RequestKiB > 0 {
			note = "; the disk's own request size back"
		}
	}
	d.changed = in.Now
	return []Correction{{Kind: Unthrottle, Resource: DiskIO, IOLimit: next, IORequestKiB: request, Controller: "diskio", Signal: in.Now,
		Reason: fmt.Sprintf("guaranteed I/O calm for %s%s", in.Now.Sub(d.calmFrom).Round(time.Second), note)}}
}

// startCapped caps revocable I/O that runs uncapped on a node whose
// guaranteed work does disk I/O: at GuardedStartFraction of the disk
// rate, at least the floor, at most once per DecreaseInterval (a cap taken
// off from outside is put back, not fought).
func (d *DiskIOController) startCapped(in Input, start, floor float64, floorWhy string) []Correction {
	d.calmFrom = time.Time{}
	if !d.decreased.IsZero() && in.Now.Sub(d.decreased) < d.cfg.DecreaseInterval {
		return nil
	}
	base := start
	if disk, _ := d.disk(in); disk <= 0 {
		base = d.cfg.StartBytesPerSecond
	}
	next, why := d.cfg.GuardedStartFraction*base, fmt.Sprintf("%.0f%% of %s", 100*d.cfg.GuardedStartFraction, d.startWhat(in))
	if next < floor {
		next, why = floor, floorWhy
	}
	d.changed, d.decreased = in.Now, in.Now
	return []Correction{{Kind: Throttle, Resource: DiskIO, IOLimit: next, IORequestKiB: d.cfg.RequestKiB, Controller: "diskio", Signal: in.Now,
		Reason: fmt.Sprintf("%s; revocable disk I/O starts capped at %s (%s)%s", d.guardedBy, formatRateBytes(next), why, d.requestNote())}}
}

// startWhat names the rate the start cap is a fraction of.
func (d *DiskIOController) startWhat(in Input) string {
	disk, what := d.disk(in)
	if disk <= 0 {
		return "the start value " + formatRateBytes(d.cfg.StartBytesPerSecond)
	}
	return what + " " + formatRateBytes(disk)
}

// requestNote says, in a Throttle's reason, how long the disk's requests
// are cut to while the cap is on.
func (d *DiskIOController) requestNote() string {
	if d.cfg.RequestKiB == 0 {
		return ""
	}
	return fmt.Sprintf(", requests <= %d KiB", d.cfg.RequestKiB)
}

// floorNote says when a cap is the floor, and what the floor is.
func floorNote(next, floor float64, why string) string {
	if next != floor {
		return ""
	}
	return " (" + why + ")"
}

// pressure returns the strongest I/O pressure signal at scale × the
// thresholds, when it was observed, and whether it is a stall
// (StallEnter); "" when there is none.
func (d *DiskIOController) pressure(in Input, scale float64) (string, time.Time, bool) {
	cfg := d.cfg
	for i := range in.Containers {
		c := &in.Containers[i]
		if !c.guarded() {
			continue
		}
		if enter := time.Duration(float64(cfg.StallEnter) * scale); enter > 0 {
			if c.Syncs > 0 && c.SyncP99 > enter {
				return fmt.Sprintf("%s fsync p99 %s over %d > %s (a stall)", c.ID, c.SyncP99, c.Syncs, enter), c.sampledAt(in.Now), true
			}
			if c.BlockIOs > 0 && c.BlockP99 > enter {
				return fmt.Sprintf("%s block I/O p99 %s over %d requests > %s (a stall)", c.ID, c.BlockP99, c.BlockIOs, enter), c.sampledAt(in.Now), true
			}
		}
		if enter := time.Duration(float64(cfg.SyncP99Enter) * scale); enter > 0 && c.Syncs >= max(cfg.MinSyncs, 1) && c.SyncP99 > enter {
			return fmt.Sprintf("%s fsync p99 %s over %d > %s", c.ID, c.SyncP99, c.Syncs, enter), c.sampledAt(in.Now), false
		}
		if q, ok := d.quiet[c.ID]; ok && cfg.SyncRatioEnter > 0 && c.Syncs >= max(cfg.MinSyncs, 1) {
			ratio := 1 + (cfg.SyncRatioEnter-1)*scale
			if enter := max(time.Duration(ratio*float64(q)), cfg.SyncP99Min); c.SyncP99 > enter {
				return fmt.Sprintf("%s fsync p99 %s over %d > %.2g x %s (its p99 while revocable work wrote nothing)", c.ID, c.SyncP99, c.Syncs, ratio, q.Round(10*time.Microsecond)), c.sampledAt(in.Now), false
			}
		}
		if enter := time.Duration(float64(cfg.BlockP99Enter) * scale); enter > 0 && c.BlockIOs >= max(cfg.MinBlockIOs, 1) && c.BlockP99 > enter {
			return fmt.Sprintf("%s block I/O p99 %s over %d requests > %s", c.ID, c.BlockP99, c.BlockIOs, enter), c.sampledAt(in.Now), false
		}
		if cfg.FullEnter > 0 && c.IOPressureFull10 > cfg.FullEnter*scale {
			return fmt.Sprintf("%s io.pressure full avg10 %.1f%% > %g%%", c.ID, c.IOPressureFull10, cfg.FullEnter*scale), c.sampledAt(in.Now), false
		}
		if cfg.SomeEnter > 0 && c.IOPressureSome10 > cfg.SomeEnter*scale {
			return fmt.Sprintf("%s io.pressure some avg10 %.1f%% > %g%%", c.ID, c.IOPressureSome10, cfg.SomeEnter*scale), c.sampledAt(in.Now), false
		}
	}
	if cfg.NodeFullEnter > 0 && in.Node.IOPressureFull10 > cfg.NodeFullEnter*scale {
		return fmt.Sprintf("node io pressure full avg10 %.1f%% > %g%%", in.Node.IOPressureFull10, cfg.NodeFullEnter*scale), in.Now, false
	}
	return "", in.Now, false
}

// formatRateBytes formats bytes per second in MiB/s.
func formatRateBytes(bps float64) string {
	return fmt.Sprintf("%.1f MiB/s", bps/(1<<20))
}
