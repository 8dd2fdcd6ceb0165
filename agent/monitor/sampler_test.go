package monitor

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// rel is the container's cgroup in the sampler tests' fake trees.
const rel = "s/g/c"

// cgroupfsCase is one case of a cgroupfs sampler's table: a fake tree in,
// one sample out.
type cgroupfsCase struct {
	name string
	// files are written under the cgroup mountpoint; dirs are created
	// there (a cgroup without some control file).
	files map[string]string
	dirs  []string
	// target is the container (its CgroupPath is rel).
	target Target
	// want is what the sample sets: the statistics and Usage.MemUsage.
	want     *slacklinev1.ResourceStatistics
	memUsage uint64
	// wantErr is errVanished, or a substring of another error.
	wantErr    error
	errMention string
}

// runCgroupfsCases samples each case's tree once with a sampler made by
// newSampler for a host of the given layout.
func runCgroupfsCases(t *testing.T, mode cgroups.Mode, newSampler func(*host, string) sampler, cases []cgroupfsCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mount := t.TempDir()
			writeFiles(t, mount, tc.files)
			for _, d := range tc.dirs {
				if err := os.MkdirAll(filepath.Join(mount, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			s := newSampler(&host{layout: layoutOf(mode, mount)}, rel)
			t.Cleanup(func() {
				for _, f := range s.files() {
					f.close()
				}
			})
			target := tc.target
			target.CgroupPath = rel
			u := Usage{Time: t0, Stats: &slacklinev1.ResourceStatistics{}}
			err := s.sample(newScratch(), &target, &u)
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("sample() error = %v, want %v", err, tc.wantErr)
				}
				return
			case tc.errMention != "":
				if err == nil || !strings.Contains(err.Error(), tc.errMention) {
					t.Fatalf("sample() error = %v, want one mentioning %q", err, tc.errMention)
				}
				return
			case err != nil:
				t.Fatalf("sample() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, u.Stats, protocmp.Transform()); diff != "" {
				t.Errorf("statistics (-want +got):\n%s", diff)
			}
			if u.MemUsage != tc.memUsage {
				t.Errorf("MemUsage = %d, want %d", u.MemUsage, tc.memUsage)
			}
		})
	}
}

func TestV2CPUSampler(t *testing.T) {
	t.Parallel()
	runCgroupfsCases(t, cgroups.ModeV2, newV2CPU, []cgroupfsCase{
		{
			name: "usage and throttling in microseconds",
			files: map[string]string{rel + "/cpu.stat": "usage_usec 2500000\nuser_usec 1500000\nsystem_usec 1000000\n" +
				"nr_periods 40\nnr_throttled 7\nthrottled_usec 350000\nnr_bursts 1\nburst_usec 9\n"},
			want: &slacklinev1.ResourceStatistics{CpusUsageSecs: 2.5, CpusUserTimeSecs: 1.5, CpusSystemTimeSecs: 1,
				CpusNrPeriods: 40, CpusNrThrottled: 7, CpusThrottledTimeSecs: 0.35},
		},
		{
			name:  "no cpu controller: core statistics only",
			files: map[string]string{rel + "/cpu.stat": "usage_usec 1000\nuser_usec 600\nsystem_usec 400\n"},
			want:  &slacklinev1.ResourceStatistics{CpusUsageSecs: 0.001, CpusUserTimeSecs: 0.0006, CpusSystemTimeSecs: 0.0004},
		},
		{
			name:  "malformed lines are skipped",
			files: map[string]string{rel + "/cpu.stat": "usage_usec 10\nbogus\nuser_usec x\nsystem_usec -1\nnr_periods 3"},
			want:  &slacklinev1.ResourceStatistics{CpusUsageSecs: 0.00001, CpusNrPeriods: 3},
		},
		{
			name: "cgroup without cpu.stat",
			dirs: []string{rel},
			want: &slacklinev1.ResourceStatistics{},
		},
		{name: "cgroup gone", wantErr: errVanished},
		{name: "unreadable cpu.stat", dirs: []string{rel + "/cpu.stat"}, errMention: rel + "/cpu.stat: is a directory"},
	})
}

func TestHybridCPUSampler(t *testing.T) {
	t.Parallel()
	const (
		core    = "unified/" + rel + "/cpu.stat"
		v1      = "cpu/" + rel + "/cpu.stat"
		usage   = "cpuacct/" + rel + "/cpuacct.usage"
		cpuacct = "cpuacct/" + rel + "/cpuacct.stat"
	)
	throttling := "nr_periods 40\nnr_throttled 7\nthrottled_time 350000000\nnr_bursts 0\nburst_time 0\n"
	runCgroupfsCases(t, cgroups.ModeHybrid, newHybridCPU, []cgroupfsCase{
		{
			name: "core cpu.stat in the v2 tree, throttling in v1 nanoseconds",
			files: map[string]string{core: "usage_usec 2000000\nuser_usec 1500000\nsystem_usec 500000\nnice_usec 0\n",
				v1: throttling, usage: "9000000000\n", cpuacct: "user 1\nsystem 1\n"},
			want: &slacklinev1.ResourceStatistics{CpusUsageSecs: 2, CpusUserTimeSecs: 1.5, CpusSystemTimeSecs: 0.5,
				CpusNrPeriods: 40, CpusNrThrottled: 7, CpusThrottledTimeSecs: 0.35},
		},
		{
			name:  "old kernel: cpuacct.usage in ns, cpuacct.stat in USER_HZ",
			files: map[string]string{usage: "3000000000\n", cpuacct: "user 250\nsystem 50\n", v1: throttling},
			dirs:  []string{"unified/" + rel},
			want: &slacklinev1.ResourceStatistics{CpusUsageSecs: 3, CpusUserTimeSecs: 2.5, CpusSystemTimeSecs: 0.5,
				CpusNrPeriods: 40, CpusNrThrottled: 7, CpusThrottledTimeSecs: 0.35},
		},
		{
			name:  "old kernel, cpuacct mounted apart and not populated: throttling only",
			files: map[string]string{v1: throttling},
			dirs:  []string{"unified/" + rel},
			want:  &slacklinev1.ResourceStatistics{CpusNrPeriods: 40, CpusNrThrottled: 7, CpusThrottledTimeSecs: 0.35},
		},
		{
			name:  "no v1 cpu cgroup: no throttling",
			files: map[string]string{core: "usage_usec 7\nuser_usec 5\nsystem_usec 2\n"},
			want:  &slacklinev1.ResourceStatistics{CpusUsageSecs: 0.000007, CpusUserTimeSecs: 0.000005, CpusSystemTimeSecs: 0.000002},
		},
		{name: "cgroup gone from the v2 tree", files: map[string]string{v1: throttling}, wantErr: errVanished},
		{name: "unreadable v1 cpu.stat", files: map[string]string{core: "usage_usec 1\n"}, dirs: []string{v1}, errMention: v1},
	})
}

func TestV2MemorySampler(t *testing.T) {
	t.Parallel()
	full := map[string]string{
		rel + "/memory.current": "104857600\n",
		rel + "/memory.stat": "anon 52428800\nfile 41943040\nkernel 1048576\nshmem 4096\nactive_anon 50000000\ninactive_anon 3000000\n" +
			"active_file 40000000\ninactive_file 1943040\n",
		rel + "/memory.max":    "268435456\n",
		rel + "/memory.events": "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n",
	}
	with := func(rel, content string) map[string]string {
		m := make(map[string]string, len(full))
		for k, v := range full {
			m[k] = v
		}
		m[rel] = content
		return m
	}
	runCgroupfsCases(t, cgroups.ModeV2, newMemorySampler(v2Memory), []cgroupfsCase{
		{
			name: "every file", files: full, target: Target{MemLimit: 1 << 30},
			want: &slacklinev1.ResourceStatistics{MemRssBytes: 52428800, MemCacheBytes: 41943040, MemAnonBytes: 53000000, MemWorkingSetBytes: 92428800,
				MemLimitBytes: 268435456, OomEvents: 2},
			memUsage: 104857600,
		},
		{
			name: "no limit: the target's", files: with(rel+"/memory.max", "max\n"), target: Target{MemLimit: 12345},
			want: &slacklinev1.ResourceStatistics{MemRssBytes: 52428800, MemCacheBytes: 41943040, MemAnonBytes: 53000000, MemWorkingSetBytes: 92428800,
				MemLimitBytes: 12345, OomEvents: 2},
			memUsage: 104857600,
		},
		{
			name: "kernel without oom_kill in memory.events", files: with(rel+"/memory.events", "low 0\nhigh 0\nmax 12\noom 3\n"),
			want: &slacklinev1.ResourceStatistics{MemRssBytes: 52428800, MemCacheBytes: 41943040, MemAnonBytes: 53000000, MemWorkingSetBytes: 92428800,
				MemLimitBytes: 268435456},
			memUsage: 104857600,
		},
		{
			name: "no memory controller", files: map[string]string{rel + "/cpu.stat": "usage_usec 1\n"}, target: Target{MemLimit: 1 << 20},
			want: &slacklinev1.ResourceStatistics{MemLimitBytes: 1 << 20},
		},
		{name: "cgroup gone", wantErr: errVanished},
		{name: "unreadable memory.stat", files: map[string]string{rel + "/memory.current": "1\n"}, dirs: []string{rel + "/memory.stat"},
			errMention: rel + "/memory.stat"},
	})
}

func TestHybridMemorySampler(t *testing.T) {
	t.Parallel()
	const dir = "memory/" + rel + "/"
	full := map[string]string{
		dir + "memory.usage_in_bytes": "104857600\n",
		// The non-hierarchical keys (cache, rss, active_anon) are not read.
		dir + "memory.stat": "cache 1\nrss 2\nactive_anon 3\ninactive_anon 4\ntotal_cache 41943040\ntotal_rss 52428800\ntotal_shmem 4096\n" +
			"total_active_anon 50000000\ntotal_inactive_anon 3000000\ntotal_active_file 40000000\n",
		dir + "memory.limit_in_bytes": "268435456\n",
		dir + "memory.oom_control":    "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
	}
	unlimited := make(map[string]string)
	for k, v := range full {
		unlimited[k] = v
	}
	unlimited[dir+"memory.limit_in_bytes"] = "9223372036854771712\n"
	runCgroupfsCases(t, cgroups.ModeHybrid, newMemorySampler(v1Memory), []cgroupfsCase{
		{
			name: "every file", files: full, dirs: []string{"unified/" + rel}, target: Target{MemLimit: 1 << 30},
			want: &slacklinev1.ResourceStatistics{MemRssBytes: 52428800, MemCacheBytes: 41943040, MemAnonBytes: 53000000, MemWorkingSetBytes: 92428800,
				MemLimitBytes: 268435456, OomEvents: 2},
			memUsage: 104857600,
		},
		{
			name: "unlimited (2^63 rounded to pages): the target's", files: unlimited, dirs: []string{"unified/" + rel},
			target: Target{MemLimit: 12345},
			want: &slacklinev1.ResourceStatistics{MemRssBytes: 52428800, MemCacheBytes: 41943040, MemAnonBytes: 53000000, MemWorkingSetBytes: 92428800,
				MemLimitBytes: 12345, OomEvents: 2},
			memUsage: 104857600,
		},
		{
			name: "no memory cgroup", dirs: []string{"unified/" + rel}, target: Target{MemLimit: 1 << 20},
			want: &slacklinev1.ResourceStatistics{MemLimitBytes: 1 << 20},
		},
		{name: "cgroup gone", wantErr: errVanished},
	})
}

func TestPressureSampler(t *testing.T) {
	t.Parallel()
	for _, mode := range []cgroups.Mode{cgroups.ModeV2, cgroups.ModeHybrid} {
		dir := rel + "/"
		if mode == cgroups.ModeHybrid {
			dir = "unified/" + rel + "/"
		}
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			runCgroupfsCases(t, mode, newPressureSampler, []cgroupfsCase{
				{
					name: "cpu, memory and io",
					files: map[string]string{
						dir + "cpu.pressure":    "some avg10=12.50 avg60=0.50 avg300=0.25 total=3000000\nfull avg10=1.25 avg60=0.05 avg300=0.02 total=1500000\n",
						dir + "memory.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=200000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=100000\n",
						dir + "io.pressure":     "some avg10=2.00 avg60=1.00 avg300=0.50 total=700000\nfull avg10=1.00 avg60=0.75 avg300=0.25 total=600000\n",
					},
					want: &slacklinev1.ResourceStatistics{
						CpuPressure: &slacklinev1.Pressure{SomeAvg10: 12.5, SomeAvg60: 0.5, SomeAvg300: 0.25, SomeTotalSecs: 3,
							FullAvg10: 1.25, FullAvg60: 0.05, FullAvg300: 0.02, FullTotalSecs: 1.5},
						MemoryPressure: &slacklinev1.Pressure{SomeTotalSecs: 0.2, FullTotalSecs: 0.1},
						IoPressure: &slacklinev1.Pressure{SomeAvg10: 2, SomeAvg60: 1, SomeAvg300: 0.5, SomeTotalSecs: 0.7,
							FullAvg10: 1, FullAvg60: 0.75, FullAvg300: 0.25, FullTotalSecs: 0.6},
					},
				},
				{
					name:  "cpu.pressure without a full line, no memory or io files",
					files: map[string]string{dir + "cpu.pressure": "some avg10=1.00 avg60=2.00 avg300=3.00 total=4000000\n"},
					want: &slacklinev1.ResourceStatistics{
						CpuPressure: &slacklinev1.Pressure{SomeAvg10: 1, SomeAvg60: 2, SomeAvg300: 3, SomeTotalSecs: 4}},
				},
				{name: "kernel without PSI", dirs: []string{dir}, want: &slacklinev1.ResourceStatistics{}},
				{name: "cgroup gone", wantErr: errVanished},
			})
		})
	}
}

// ebpfStep is one sample of an eBPF sampler test: the figures (or the
// error) the eBPF source returns, at t0 + at.
type ebpfStep struct {
	at    time.Duration
	stats EBPFStats
	err   error
}

// buckets returns a histogram with counts[i] at index i.
func buckets(n int, counts map[int]uint64) []uint64 {
	b := make([]uint64, n)
	for i, c := range counts {
		b[i] = c
	}
	return b
}

func TestEBPFSampler(t *testing.T) {
	t.Parallel()
	cumulative := EBPFStats{OnCPU: 1900 * time.Millisecond, Wakeups: 10, RunqBuckets: buckets(32, map[int]uint64{10: 10}),
		RunqSum: 15 * time.Microsecond, DelayedByRevocable: 250 * time.Millisecond,
		NetRxBytes: 500_000, NetRxPackets: 10, NetTxBytes: 1_000_000, NetTxPackets: 1000,
		ReclaimStall: 30 * time.Millisecond, OOMKills: 1,
		TCPRTTBuckets: buckets(32, map[int]uint64{7: 10}), TCPRTTCount: 10, TCPRetransmits: 1}
	// 500 ms later: 98 more wakeups in [2^10, 2^11) ns and 2 in [2^20, 2^21);
	// 6.25 MB sent (100 Mbit/s), 1.25 MB received (20 Mbit/s), 500 packets,
	// 5 retransmissions; 98 round trips in [128, 256) µs and 2 in [8192, 16384) µs.
	later := cumulative
	later.Wakeups = 110
	later.RunqBuckets = buckets(32, map[int]uint64{10: 108, 20: 2})
	later.NetTxBytes, later.NetRxBytes, later.NetTxPackets = 7_250_000, 1_750_000, 1500
	later.TCPRTTBuckets = buckets(32, map[int]uint64{7: 108, 13: 2})
	later.TCPRTTCount, later.TCPRetransmits = 110, 6
	// The cumulative figures of one sample, without interval figures.
	statsOf := func(e EBPFStats, runq []uint64, rtt []uint64) *slacklinev1.ResourceStatistics {
		st := &slacklinev1.ResourceStatistics{OncpuSecs: e.OnCPU.Seconds(), DelayedByRevocableSecs: e.DelayedByRevocable.Seconds(),
			NetRxBytes: e.NetRxBytes, NetRxPackets: e.NetRxPackets, NetTxBytes: e.NetTxBytes, NetTxPackets: e.NetTxPackets,
			MemReclaimStallSecs: e.ReclaimStall.Seconds(), OomEvents: e.OOMKills,
			Runqueue: &slacklinev1.RunQueueLatency{BucketsLog2Ns: runq, Wakeups: e.Wakeups, TotalSecs: e.RunqSum.Seconds()}}
		if rtt != nil {
			st.Tcp = &slacklinev1.TcpStatistics{RttBucketsLog2Us: rtt, RttSamples: e.TCPRTTCount, Retransmits: e.TCPRetransmits}
		}
		return st
	}
	firstStats := statsOf(cumulative, buckets(11, map[int]uint64{10: 10}), buckets(8, map[int]uint64{7: 10}))
	laterStats := statsOf(later, buckets(21, map[int]uint64{10: 108, 20: 2}), buckets(14, map[int]uint64{7: 108, 13: 2}))
	// p50 of the runqueue deltas: rank 50 of 100, the 50th of 98 in
	// [1024, 2048) ns: 1024 + 50/98*1024 = 1546.4 ns. p99: rank 99, the
	// first of 2 in [2^20, 2^21): half-way. TCP: the same ranks over µs
	// buckets 7 and 13 (128 + 50/98*128 = 193.3 µs, whole µs kept).
	laterStats.NetTxMbps, laterStats.NetRxMbps = 100, 20
	laterStats.Runqueue.P50Seconds, laterStats.Runqueue.P99Seconds = 1546e-9, 1572864e-9
	laterStats.Tcp.RttP50Seconds, laterStats.Tcp.RttP99Seconds = 193e-6, 12288e-6

	for _, tc := range []struct {
		name     string
		byInode  bool   // no Target.CgroupID: the directory's inode
		oomKills uint64 // what the memory sampler found
		steps    []ebpfStep
		want     Usage // the last step's (Time and runqSum are filled in)
		wantErr  string
	}{
		{
			name:  "first sample: cumulative figures only",
			steps: []ebpfStep{{stats: cumulative}},
			want:  Usage{EBPF: true, Stats: firstStats},
		},
		{
			name:  "second sample: percentiles and rates over the interval",
			steps: []ebpfStep{{stats: cumulative}, {at: 500 * time.Millisecond, stats: later}},
			want: Usage{EBPF: true, Stats: laterStats, RunqP50: 1546, RunqP99: 1572864, NetTxMbps: 100, NetRxMbps: 20,
				NetTxPackets: 500, TCPRTTP50: 193 * time.Microsecond, TCPRTTP99: 12288 * time.Microsecond, TCPRetransmits: 5},
		},
		{
			name:    "lookup fails: nothing set",
			steps:   []ebpfStep{{err: errors.New("not tracked")}},
			want:    Usage{Stats: &slacklinev1.ResourceStatistics{}},
			wantErr: "ebpf stats of cgroup 7: not tracked",
		},
		{
			name: "a failed lookup forgets the baselines",
			steps: []ebpfStep{{stats: cumulative}, {at: 100 * time.Millisecond, err: errors.New("not tracked")},
				{at: 500 * time.Millisecond, stats: later}},
			want: Usage{EBPF: true, Stats: statsOf(later, laterStats.Runqueue.BucketsLog2Ns, laterStats.Tcp.RttBucketsLog2Us)},
		},
		{
			name: "counters went backwards: the buckets are taken whole, the network interval restarts",
			steps: []ebpfStep{{stats: later}, {at: 500 * time.Millisecond, stats: EBPFStats{
				RunqBuckets: buckets(32, map[int]uint64{10: 4}), NetTxBytes: 10}}},
			// 4 in [1024, 2048): p50 half-way, p99 at 1024 + 0.99*1024.
			want: Usage{EBPF: true, RunqP50: 1536, RunqP99: 2037, Stats: &slacklinev1.ResourceStatistics{NetTxBytes: 10,
				Runqueue: &slacklinev1.RunQueueLatency{BucketsLog2Ns: buckets(11, map[int]uint64{10: 4}), P50Seconds: 1536e-9, P99Seconds: 2037e-9}}},
		},
		{
			name:     "the cgroup's OOM kills when eBPF saw fewer",
			oomKills: 2,
			steps:    []ebpfStep{{stats: EBPFStats{OOMKills: 1}}},
			want:     Usage{EBPF: true, Stats: &slacklinev1.ResourceStatistics{OomEvents: 2, Runqueue: &slacklinev1.RunQueueLatency{}}},
		},
		{
			name:     "eBPF's OOM kills when it saw more",
			oomKills: 2,
			steps:    []ebpfStep{{stats: EBPFStats{OOMKills: 5}}},
			want:     Usage{EBPF: true, Stats: &slacklinev1.ResourceStatistics{OomEvents: 5, Runqueue: &slacklinev1.RunQueueLatency{}}},
		},
		{
			name:    "cgroup id from the v2 directory's inode",
			byInode: true,
			steps:   []ebpfStep{{stats: EBPFStats{OnCPU: time.Second}}},
			want:    Usage{EBPF: true, Stats: &slacklinev1.ResourceStatistics{OncpuSecs: 1, Runqueue: &slacklinev1.RunQueueLatency{}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mount := t.TempDir()
			dir := filepath.Join(mount, rel)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			wantID := fi.Sys().(*syscall.Stat_t).Ino
			target := Target{ID: "c", CgroupPath: rel}
			if !tc.byInode {
				target.CgroupID, wantID = 7, 7
			}
			var step ebpfStep
			var handed EBPFStats
			src := EBPFFunc(func(id uint64) (EBPFStats, error) {
				if id != wantID {
					t.Errorf("Stats(%d), want the cgroup id %d", id, wantID)
				}
				handed = step.stats
				handed.RunqBuckets, handed.TCPRTTBuckets = slices.Clone(handed.RunqBuckets), slices.Clone(handed.TCPRTTBuckets)
				return handed, step.err
			})
			s := newEBPFSampler(&host{layout: layoutOf(cgroups.ModeV2, mount), ebpf: src}, rel)
			sc := newScratch()
			var u Usage
			for _, step = range tc.steps {
				u = Usage{Time: t0.Add(step.at), Stats: &slacklinev1.ResourceStatistics{OomEvents: tc.oomKills}}
				err = s.sample(sc, &target, &u)
				// Like the bpf package, reuse the buffers handed out: the
				// sampler must keep copies.
				for _, b := range [][]uint64{handed.RunqBuckets, handed.TCPRTTBuckets} {
					for i := range b {
						b[i] = 1 << 40
					}
				}
			}
			if tc.wantErr == "" && err != nil {
				t.Fatalf("sample() error = %v", err)
			}
			if tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Fatalf("sample() error = %v, want %q", err, tc.wantErr)
			}
			want := tc.want
			want.Time = u.Time
			if u.EBPF {
				want.runqSum = step.stats.RunqSum
			}
			if diff := cmp.Diff(want, u, protocmp.Transform(), cmp.AllowUnexported(Usage{})); diff != "" {
				t.Errorf("last sample (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEBPFSamplerWithoutCgroup(t *testing.T) {
	t.Parallel()
	mount := t.TempDir()
	src := EBPFFunc(func(id uint64) (EBPFStats, error) {
		t.Errorf("Stats(%d) called without a cgroup id", id)
		return EBPFStats{}, nil
	})
	s := newEBPFSampler(&host{layout: layoutOf(cgroups.ModeV2, mount), ebpf: src}, rel)
	u := Usage{Time: t0, Stats: &slacklinev1.ResourceStatistics{}}
	err := s.sample(newScratch(), &Target{CgroupPath: rel}, &u)
	if err == nil || !strings.Contains(err.Error(), "cgroup id of "+filepath.Join(mount, rel)) {
		t.Errorf("sample() error = %v, want one naming the missing directory", err)
	}
	if u.EBPF || u.Stats.Runqueue != nil {
		t.Errorf("eBPF figures set after a failure: %+v", u)
	}
}

func TestSources(t *testing.T) {
	t.Parallel()
	ebpf := EBPFFunc(func(uint64) (EBPFStats, error) { return EBPFStats{}, nil })
	for _, tc := range []struct {
		mode cgroups.Mode
		ebpf EBPF
		want []string
	}{
		{cgroups.ModeV2, nil, []string{"v2-cpu", "v2-memory", "psi"}},
		{cgroups.ModeV2, ebpf, []string{"v2-cpu", "v2-memory", "psi", "ebpf"}},
		{cgroups.ModeHybrid, nil, []string{"hybrid-cpu", "hybrid-memory", "psi"}},
		{cgroups.ModeHybrid, ebpf, []string{"hybrid-cpu", "hybrid-memory", "psi", "ebpf"}},
	} {
		name := string(tc.mode) + " without eBPF"
		if tc.ebpf != nil {
			name = string(tc.mode) + " with eBPF"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			fakeProc(t, filepath.Join(dir, "proc"), 1)
			m, err := New(Config{Mode: string(tc.mode), CgroupMountpoint: filepath.Join(dir, "cgroup"),
				ProcRoot: filepath.Join(dir, "proc"), EBPF: tc.ebpf, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, m.Sources()); diff != "" {
				t.Errorf("Sources() (-want +got):\n%s", diff)
			}
			for _, s := range m.sources {
				if s.optional != (s.name == "ebpf") {
					t.Errorf("source %s optional = %v: only eBPF fails softly", s.name, s.optional)
				}
			}
			m.SetTargets([]Target{{ID: "c", CgroupPath: rel}})
			if got := len(m.containers["c"].samplers); got != len(tc.want) {
				t.Errorf("a container has %d samplers, want one per source (%d)", got, len(tc.want))
			}
		})
	}
}

// TestEBPFSyncFigures: the fsync figures over an interval (count and p99
// of the bucket deltas) and the cumulative histogram in DiskSync; none
// before the first synchronous write; a count that went backwards
// restarts the interval.
func TestEBPFSyncFigures(t *testing.T) {
	t.Parallel()
	e := &ebpfSampler{}
	var s scratch
	sample := func(st EBPFStats) Usage {
		u := Usage{Stats: &slacklinev1.ResourceStatistics{}}
		e.sampleSync(&s, &u, &st)
		return u
	}
	if u := sample(EBPFStats{}); u.Stats.DiskSync != nil || u.Syncs != 0 {
		t.Fatalf("no fsync yet: %+v %v", u.Stats.DiskSync, u.Syncs)
	}
	// 100 fsyncs in [2^20, 2^21) ns (about 1 ms): the first measured
	// interval counts them all (the previous sample had none).
	u := sample(EBPFStats{SyncBuckets: buckets(32, map[int]uint64{20: 100}), SyncCount: 100, SyncWait: 150 * time.Millisecond})
	if u.Syncs != 100 || u.SyncP99 < 1<<20 || u.SyncP99 > 1<<21 {
		t.Errorf("first interval: %d fsyncs, p99 %v; want 100 in [2^20, 2^21) ns", u.Syncs, u.SyncP99)
	}
	// 98 more around 1 ms and 2 in [2^25, 2^26) ns (about 50 ms): the p99
	// (rank 99 of 100) is the first of the slow two.
	u = sample(EBPFStats{SyncBuckets: buckets(32, map[int]uint64{20: 198, 25: 2}), SyncCount: 200, SyncWait: 400 * time.Millisecond})
	if u.Syncs != 100 || u.SyncP99 < 1<<25 || u.SyncP99 > 1<<26 {
		t.Errorf("second interval: %d fsyncs, p99 %v; want 100 with p99 in [2^25, 2^26) ns", u.Syncs, u.SyncP99)
	}
	ds := u.Stats.GetDiskSync()
	if ds.GetCount() != 200 || ds.GetTotalSecs() != 0.4 || len(ds.GetBucketsLog2Ns()) != 26 || ds.GetP99Seconds() != u.SyncP99.Seconds() {
		t.Errorf("DiskSync %+v", ds)
	}
	// The cgroup's entry was recreated: counts went backwards.
	if u := sample(EBPFStats{SyncBuckets: buckets(32, map[int]uint64{20: 5}), SyncCount: 5}); u.Syncs != 0 || u.SyncP99 != 0 {
		t.Errorf("after counters went backwards: %d fsyncs, p99 %v; want no interval figures", u.Syncs, u.SyncP99)
	}
}
