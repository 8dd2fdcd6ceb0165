package history

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Limits of a Store.
const (
	// DefaultWindow is how far back a Store keeps points by default.
	DefaultWindow = 15 * time.Minute
	// MaxSeries bounds the containers (and protected services) a Store
	// keeps a series for at once; a new one past it is not recorded
	// (slackline_agent_history_cut_total{limit="series"}).
	MaxSeries = 512
	// MaxPoints bounds one series' ring: 15 minutes at 100 ms. A finer
	// monitor interval keeps a shorter window; points overwritten before
	// they left the window are counted
	// (slackline_agent_history_cut_total{limit="points"}).
	MaxPoints = 9000
	// DelayStep is the period of the who-delayed-whom snapshots.
	DelayStep = 10 * time.Second
	// MaxCulprits bounds the culprits remembered per victim; further
	// culprits are summed under "other"
	// (slackline_agent_history_cut_total{limit="culprits"}).
	MaxCulprits = 32
	// OtherCulprit names what MaxCulprits folded together.
	OtherCulprit = "other"
)

// Sample is one monitor sample of one container, as Record takes it.
type Sample struct {
	// ContainerID identifies the series; TaskID and Revocable describe it.
	ContainerID, TaskID string
	Revocable           bool
	// Time is when the monitor took the sample.
	Time time.Time
	// CPUs is CPU use in cores over the interval ending at Time.
	CPUs float64
	// MemBytes is the cgroup's charged memory.
	MemBytes uint64
	// NetTxMbps and NetRxMbps are egress and ingress over the interval.
	NetTxMbps, NetRxMbps float64
	// RunqP99 is the run-queue latency p99 over the interval.
	RunqP99 time.Duration
	// DelayedByRevocableSecs is cumulative (the store differentiates it).
	DelayedByRevocableSecs float64
}

// Point is a decoded point of a series.
type Point struct {
	Time                 time.Time
	CPUs                 float64
	MemBytes             float64
	NetTxMbps, NetRxMbps float64
	RunqP99Secs          float64
	// DelayedByRevocable is seconds waited per second over the interval.
	DelayedByRevocable float64
}

// point is the kept form of a sample: 16 bytes. dt is the time since the
// series' previous point in milliseconds (the newest point's time is
// kept in the series); values are bfloat16 (3 significant digits).
type point struct {
	dt                              uint32
	cpus, mem, tx, rx, p99, delayed uint16
}

// series is one container's ring.
type series struct {
	id, taskID string
	revocable  bool
	ring       []point   // fixed capacity
	start, n   int       // oldest point, number kept
	first      time.Time // the oldest point's time
	last       time.Time // the newest point's time
	lastDelay  float64   // the previous sample's cumulative delay
	hasDelay   bool
	seen       uint64 // the Record pass that last saw it live
}

// Config configures a Store.
type Config struct {
	// Window is how far back points are kept (default DefaultWindow).
	Window time.Duration
	// Interval is the monitor's sampling interval; it sizes the rings:
	// Window/Interval points, at most MaxPoints (default 1 s).
	Interval time.Duration
}

// Store keeps the recent series of a node's containers in fixed-size
// rings. Its methods are safe for concurrent use.
type Store struct {
	window   time.Duration
	interval time.Duration
	capacity int

	mu     sync.Mutex
	series map[string]*series
	delays map[string]*delaySeries // by victim
	pass   uint64
	cut    *prometheus.CounterVec
	kept   prometheus.GaugeFunc
}

// New returns an empty Store.
func New(cfg Config) *Store {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	capacity := int(min(int64(MaxPoints), int64(cfg.Window/cfg.Interval)+1))
	s := &Store{window: cfg.Window, interval: cfg.Interval, capacity: capacity, series: map[string]*series{}}
	s.cut = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slackline_agent_history_cut_total",
		Help: "What the agent's history limits cut: series not recorded past MaxSeries (limit=series), points overwritten before they left the window (limit=points), culprits folded into other (limit=culprits).",
	}, []string{"limit"})
	for _, l := range []string{"series", "points", "culprits"} {
		s.cut.WithLabelValues(l)
	}
	s.kept = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "slackline_agent_history_series",
		Help: "Container series the agent's history keeps (live and recently ended).",
	}, func() float64 {
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(len(s.series))
	})
	return s
}

// Window returns how far back the store keeps points.
func (s *Store) Window() time.Duration { return s.window }

// Interval returns the monitor interval the store was sized for.
func (s *Store) Interval() time.Duration { return s.interval }

// Capacity returns the points one series keeps.
func (s *Store) Capacity() int { return s.capacity }

// Collectors returns the store's metrics.
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.cut, s.kept}
}

// Record appends one monitor pass taken at now: a point to each sample's
// series (a sample not newer than its series' last point is ignored).
// Series whose last point is older than the window are dropped.
func (s *Store) Record(now time.Time, samples []Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pass++
	for i := range samples {
		u := &samples[i]
		se, ok := s.series[u.ContainerID]
		if !ok {
			if len(s.series) >= MaxSeries {
				s.cut.WithLabelValues("series").Inc()
				continue
			}
			se = &series{id: u.ContainerID, ring: make([]point, s.capacity)}
			s.series[u.ContainerID] = se
		}
		se.taskID, se.revocable, se.seen = u.TaskID, u.Revocable, s.pass
		s.append(se, u)
	}
	for id, se := range s.series {
		if now.Sub(se.last) > s.window {
			delete(s.series, id)
		}
	}
}

// append adds u to se's ring. Called with s.mu held.
func (s *Store) append(se *series, u *Sample) {
	if se.n > 0 && !u.Time.After(se.last) {
		return
	}
	var delayed float64
	if se.hasDelay && se.n > 0 && u.DelayedByRevocableSecs >= se.lastDelay {
		delayed = (u.DelayedByRevocableSecs - se.lastDelay) / u.Time.Sub(se.last).Seconds()
	}
	se.lastDelay, se.hasDelay = u.DelayedByRevocableSecs, true
	var dt uint32
	if se.n > 0 {
		dt = uint32(min(int64(math.MaxUint32), u.Time.Sub(se.last).Milliseconds()))
	}
	p := point{dt: dt, cpus: bf16(u.CPUs), mem: bf16(float64(u.MemBytes)), tx: bf16(u.NetTxMbps), rx: bf16(u.NetRxMbps),
		p99: bf16(u.RunqP99.Seconds()), delayed: bf16(delayed)}
	if se.n == len(se.ring) {
		// The oldest point leaves; count it when it was still in the window.
		if u.Time.Sub(se.first) <= s.window {
			s.cut.WithLabelValues("points").Inc()
		}
		se.start = (se.start + 1) % len(se.ring)
		se.n--
		se.first = se.first.Add(time.Duration(se.ring[se.start].dt) * time.Millisecond)
	}
	if se.n == 0 {
		se.first = u.Time
	}
	se.ring[(se.start+se.n)%len(se.ring)] = p
	se.n++
	se.last = u.Time
}

// Series is one container's points, as Query returns them.
type Series struct {
	ContainerID, TaskID string
	Revocable           bool
	// Ended reports that the last Record pass did not include it.
	Ended  bool
	Points []Point
}

// Query selects what Query returns.
type Query struct {
	// Since, when set, keeps only points after it.
	Since time.Time
	// Step, when above zero, averages the points of each step (aligned on
	// multiples of Step; RunqP99Secs takes the step's largest).
	Step time.Duration
	// TaskID, when set, keeps only that task's series.
	TaskID string
}

// Query returns the series q selects, sorted by task id then container id,
// their points oldest first.
func (s *Store) Query(q Query) []Series {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Series, 0, len(s.series))
	for _, se := range s.series {
		if q.TaskID != "" && se.taskID != q.TaskID {
			continue
		}
		out = append(out, Series{ContainerID: se.id, TaskID: se.taskID, Revocable: se.revocable, Ended: se.seen != s.pass,
			Points: downsample(se.points(q.Since), q.Step)})
	}
	slices.SortFunc(out, func(a, b Series) int {
		return cmp.Or(strings.Compare(a.TaskID, b.TaskID), strings.Compare(a.ContainerID, b.ContainerID))
	})
	return out
}

// QueryFit returns what Query(q) returns in at most maxPoints points in
// all, and the step they are averaged over: q.Step when that fits, else
// the finest coarser step (whole multiples of q.Step, or of the interval
// when q.Step is finer) that does. At a step of the whole window every
// series has at most two points, so with maxPoints of at least 2*MaxSeries
// the answer always fits.
func (s *Store) QueryFit(q Query, maxPoints int) ([]Series, time.Duration) {
	for {
		series := s.Query(q)
		n := 0
		for _, se := range series {
			n += len(se.Points)
		}
		if n <= maxPoints || q.Step >= s.window {
			return series, q.Step
		}
		// Points fall about in proportion to the step; a bucket boundary
		// per series may add one, which the next pass corrects.
		base := max(q.Step, s.interval)
		q.Step = min(base*time.Duration(math.Ceil(float64(n)/float64(maxPoints))), s.window)
	}
}

// points decodes the points after since, oldest first. Called with s.mu
// held.
func (se *series) points(since time.Time) []Point {
	out := make([]Point, se.n)
	t := se.last
	keep := se.n
	for j := se.n - 1; j >= 0; j-- {
		p := se.ring[(se.start+j)%len(se.ring)]
		if !since.IsZero() && !t.After(since) {
			break
		}
		out[j] = Point{Time: t, CPUs: unbf16(p.cpus), MemBytes: unbf16(p.mem), NetTxMbps: unbf16(p.tx), NetRxMbps: unbf16(p.rx),
			RunqP99Secs: unbf16(p.p99), DelayedByRevocable: unbf16(p.delayed)}
		keep = j
		t = t.Add(-time.Duration(p.dt) * time.Millisecond)
	}
	return out[keep:]
}

// downsample averages points by step (RunqP99Secs: the largest); the
// bucket's time is its last point's.
func downsample(points []Point, step time.Duration) []Point {
	if step <= 0 || len(points) == 0 {
		return points
	}
	out := points[:0:0]
	var acc Point
	n := 0
	bucket := int64(math.MinInt64)
	flush := func() {
		if n == 0 {
			return
		}
		f := float64(n)
		acc.CPUs /= f
		acc.MemBytes /= f
		acc.NetTxMbps /= f
		acc.NetRxMbps /= f
		acc.DelayedByRevocable /= f
		out = append(out, acc)
		acc, n = Point{}, 0
	}
	for _, p := range points {
		b := p.Time.UnixNano() / int64(step)
		if b != bucket {
			flush()
			bucket = b
		}
		acc.Time = p.Time
		acc.CPUs += p.CPUs
		acc.MemBytes += p.MemBytes
		acc.NetTxMbps += p.NetTxMbps
		acc.NetRxMbps += p.NetRxMbps
		acc.DelayedByRevocable += p.DelayedByRevocable
		acc.RunqP99Secs = max(acc.RunqP99Secs, p.RunqP99Secs)
		n++
	}
	flush()
	return out
}

// bf16 encodes v (negative and NaN as 0, +Inf as the largest value) in
// bfloat16, rounding to nearest even.
func bf16(v float64) uint16 {
	if !(v > 0) {
		return 0
	}
	if v > math.MaxFloat32 {
		v = math.MaxFloat32
	}
	b := math.Float32bits(float32(v))
	b += 0x7fff + (b>>16)&1
	if b>>16 == 0x7f80 { // rounded up to +Inf
		return 0x7f7f
	}
	return uint16(b >> 16)
}

// unbf16 decodes bf16.
func unbf16(h uint16) float64 {
	return float64(math.Float32frombits(uint32(h) << 16))
}
