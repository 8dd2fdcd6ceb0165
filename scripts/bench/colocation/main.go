// Command colocation is the colocation benchmark: a latency-critical HTTP
// server runs as a guaranteed task on a real agent, loaded at a fixed
// request rate by a load generator in a cgroup of its own (a service outside
// Slackline that the agent protects, --protect-cgroup), while best-effort
// tasks from batch-framework --revocable run beside it on revocable
// resources.
//
// Each repetition runs, for every scenario, one cluster with QoS "noop" and
// one with each QoS controller set compared (by default the agent's default
// set), noop first in even repetitions and last in odd ones; the summary
// gives, beside each set's ratio, its difference from the noop ratio of the
// same repetition (R-N paired), which host conditions that change between
// repetitions touch less than they touch either range. In each run the load lasts --duration while the best-effort tasks
// are frozen (cgroup.freeze) and thawed in turn every --slice: the server's
// p99 alone and beside best-effort work come from the same run, interleaved
// within seconds, so that a shared machine's background load, which changes
// from minute to minute, touches both alike (the first 200 ms of a slice are
// left out). Scenarios (--scenarios, default all):
//
//   - cpu: six CPU-bound shell loops;
//   - membw: two copy loops over buffers much larger than the last-level
//     cache (memory bandwidth and cache pollution);
//   - forkexec: four shell loops starting /bin/true (fork/exec churn);
//   - memory: a node whose memory is bounded (the agent's cgroup root goes
//     under a cgroup of the benchmark's own with a memory limit of 1.5 GiB;
//     the agent, told of 2 GiB, registers the 1.5 its limit backs), a
//     server allocated all of it whose requests read random pages of a
//     384 MiB file (a page-cache working set: the node's only reclaimable
//     memory, so that best-effort memory costs the server disk reads), and
//     three tasks sized to fit the slack that allocate 320 MiB, hold it 20 s
//     and free it for 1 s (they want the whole slack nearly all the time); S is the memory they hold on average over the
//     shared slices over the revocable mem estimate (the memory slack
//     offered); a noop run that neither hit the node's limit nor left it
//     with 256 MiB or less available measured no competition (NOT VALID);
//   - io: two writers streaming 1 MiB blocks with O_DIRECT over 256 MiB
//     files, two writes in flight each (hog --write), beside a server
//     that writes and fsyncs 4 KiB per request. Its slices go in fours:
//     writers frozen (the server alone), writers thawed (beside it),
//     writers frozen, and writer alone: the load goes on but the server
//     skips its fsyncs (the same CPU work and wakeups: an idle-priority
//     writer's rate on a shared host follows the CPU it gets, which a
//     busy high-weight neighbour changes), and the same writer processes
//     run with the agent's disk cap on them lifted for the slice (warmed
//     by a full pass over their files first). Before the load, the
//     writer's command at normal CPU priority measures the disk's rate,
//     and each run says whether the writers alone were disk-bound. S is
//     the writers' rate over the second kind over their rate over the fourth,
//     each slice's rate and the per-cycle ratios printed as spread. It
//     runs at least ten cycles (40 slices), whatever --duration says.
//     The run's directory (the agent's sandboxes, so the writers' files
//     and the server's journal) is on the disk --disk chooses: by default
//     ("loop") an ext4 file system on a loop device over a disk the
//     benchmark models and serves itself through FUSE (disk.go): a FIFO
//     of --disk-rate MiB/s, --disk-op per command, flushes of
//     --disk-flush, its bytes in a tmpfs of the run's own, its server's
//     threads at real-time priority (--disk-rt-priority) so that the
//     model answers on time whoever else wants the CPUs, each command
//     answered 2 ms or more late counted (the summary at the run's end
//     says how many, the first 50 logged with their time). The kernel's
//     block layer, blk-throttle (the agent's cap), the agent's eBPF block
//     and fsync probes and ext4's journal act on it as on any disk; only
//     its service times are the model's, the same from run to run, where
//     a shared host's virtual disk ("host") flushed in 25 ms on average.
//     With --io-layout split (the default) the modelled disk is split in
//     two halves, a loop device over the whole disk's loop device and an
//     ext4 file system each, as partitions (this guest's kernel parses no
//     partition tables and has no device-mapper): the run's directory and
//     the guaranteed sandboxes on the first, the revocable sandboxes on
//     the second (the agent's --revocable-sandbox-dir); both halves'
//     requests pass through the whole disk's queue and I/O scheduler
//     (--disk-scheduler, --disk-iosched) with the cgroups that issued
//     them, then the one model, so the writers and the server share its
//     queue, FIFO and bandwidth but not a journal;
//     --io-layout shared keeps one file system and journal for both, where
//     a writer descheduled at idle priority while holding a journal
//     handle stalls the server's fsyncs. The server gets 200 requests a
//     second unless --rate is given. Each run says which disk it ran on
//     and whether it is valid (the server alone failed at most 1% of its
//     requests, and its p50 alone stayed within four requests' spacing:
//     beyond, its requests queue behind each other and its p99s measure
//     the queue); a NOT VALID run is left out of the summary's medians,
//     which says how many were.
//
// For every run it prints the server's p50/p99/p99.9 (open loop, measured
// from each request's scheduled time), the cores used by the server, the
// load generator and best-effort work, the revocable subtree's throttling,
// what delayed the server's threads (the agent's eBPF who-delayed-whom) and
// the corrections applied; then, per scenario, the medians over repetitions
// with their spread, and one line
//
//	colocation[SCENARIO]: lc_p99_ratio=R be_share=S noop_ratio=N
//
// where R is p99 beside best-effort work / p99 alone in the runs with the
// QoS set, S best-effort cores beside the server / cores left idle with
// best-effort work frozen (/proc/stat: on a machine of its own, what the
// server and its load generator leave), and N the ratio of the noop runs
// (medians over repetitions; a run whose node left less than 0.1 core idle
// has no S, and S is NaN if no run had; with several --qos sets, SCENARIO is followed
// by ",SET"). The table also shows best-effort cores / the CPUs less what
// the server, its load generator and the agent use ("of slack"), which on
// a shared machine counts other tenants' CPU as if it were best-effort
// work's to take. Results go to --out/results.json and a PNG per scenario
// (latency per second and the revocable subtree's CPUs and limit); the
// "study" sub-command draws the study's figures from results.json files.
//
// The agent's cgroup root and the load generator's cgroup get --root-weight
// times the default CPU weight: a node given to Slackline gives its root
// most of the machine (systemd's CPUWeight=), and on a shared development
// machine the weight keeps other tenants from dominating what is measured.
// Best-effort work, at idle priority in a subtree beside the root, does not
// gain from it. Arguments after the flags go to the agent.
//
//	sudo go run ./scripts/bench/colocation --rate 400 --duration 40s --repeat 3
//	sudo go run ./scripts/bench/colocation --scenarios cpu --qos interference,memory --qos cpuset,memory
//
// Where there is no Go (a test guest), build it and its binaries static on
// the host and pass --bin (docs/vm.md).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/slackline/slackline/internal/benchutil"
	"github.com/slackline/slackline/qos"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "loadgen":
		err = runLoadgen(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "disk":
		err = runDiskServer(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "study":
		err = runStudy(os.Args[2:])
	default:
		err = run()
	}
	if err != nil {
		cleanup.waitForSignalCleanup()
		fmt.Fprintln(os.Stderr, "colocation:", err)
		os.Exit(1)
	}
}

// options are the benchmark's flags.
type options struct {
	rate        int
	rateSet     bool // --rate given: it overrides the scenarios' own
	duration    time.Duration
	slice       time.Duration
	work        time.Duration
	repeat      int
	scenarios   []scenario
	qosSets     []string
	out         string
	binDir      string
	serverStart time.Duration
	rootWeight  float64
	quietHost   time.Duration
	agentFlags  []string
	disk        diskOptions
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func run() error {
	var o options
	var scenarioNames string
	var qosSets stringList
	flag.IntVar(&o.rate, "rate", 400, "requests per second sent to the server (the io scenario: 200 unless given)")
	flag.DurationVar(&o.duration, "duration", 40*time.Second, "load duration per run (half of it with best-effort work frozen)")
	flag.DurationVar(&o.slice, "slice", 2*time.Second, "best-effort work is frozen and thawed in turn for this long")
	flag.DurationVar(&o.work, "work", 500*time.Microsecond, "CPU work per request")
	flag.IntVar(&o.repeat, "repeat", 3, "repetitions of every run; medians and spread are reported")
	flag.StringVar(&scenarioNames, "scenarios", "all", "best-effort scenarios, comma-separated: "+strings.Join(scenarioNamesList(), ", ")+", or all")
	flag.Var(&qosSets, "qos", "QoS controller set compared with noop (repeatable; default: the agent's default, "+qos.DefaultControllers+"); static:cpus=1,quota=0.5,period=10ms applies one mechanism for the whole run instead")
	flag.StringVar(&o.out, "out", "colocation-results", "directory for results.json and the plots")
	flag.DurationVar(&o.quietHost, "quiet-host-wait", 2*time.Millisecond, "the summary also gives the ratios over quiet pairs only: repetitions in which, in both runs, the server waited at most this long per second behind other tenants (\"host\") with best-effort work frozen")
	flag.DurationVar(&o.serverStart, "server-start-timeout", 30*time.Second, "how long the latency server may take to answer after its launch, the agent's eBPF monitor to load and the best-effort tasks to run (each at least a minute) (an emulated guest needs minutes)")
	prebuilt := flag.String("bin", "", "take the binaries (slackline-coordinator, slackline-agent, batch-framework, latency-server, hog) from this directory instead of building them with the go command (a machine without Go, such as a test guest: build them static on the host)")
	flag.Float64Var(&o.rootWeight, "root-weight", 100, "CPU weight of the agent's cgroup root and of the load generator's cgroup, in multiples of the default, against the host's other processes (1: the default; see the package documentation)")
	flag.StringVar(&o.disk.kind, "disk", "loop", "the io scenario's disk: loop (a loop device over a disk the benchmark models: --disk-rate, --disk-op, --disk-flush; needs /dev/fuse, losetup and mkfs.ext4) or host (the host's disk under /tmp)")
	diskRate := flag.Float64("disk-rate", 128, "--disk loop: the modelled disk's bandwidth, MiB/s")
	flag.DurationVar(&o.disk.op, "disk-op", 20*time.Microsecond, "--disk loop: the time each command holds the modelled disk, whatever its size")
	flag.Uint64Var(&o.disk.requestKiB, "disk-request-kib", 1280, "--disk loop: the loop device's largest request (queue/max_sectors_kb) at the start of each run, KiB (1280: a fresh loop device's; a loop device keeps a size set before, by the agent or by hand)")
	flag.DurationVar(&o.disk.flush, "disk-flush", 0, "--disk loop: the time a cache flush holds the modelled disk (0: power-loss protection)")
	flag.IntVar(&o.disk.rtPriority, "disk-rt-priority", 10, "--disk loop: the modelled disk's server runs its threads at this SCHED_FIFO priority (0: normal priority, its cgroup's CPU weight only), so that the model answers on time whoever else wants the CPUs, as a disk does")
	flag.StringVar(&o.disk.scheduler, "disk-scheduler", "none", "--disk loop: the modelled disk's I/O scheduler (none, mq-deadline, kyber or bfq): with bfq, the agent's I/O weight for revocable work applies in the one queue both halves share (docs/colocation-study.md: it did not help here)")
	iosched := flag.String("disk-iosched", "", "--disk loop: the scheduler's tunables, KEY=VALUE[,KEY=VALUE...] written to the whole disk's queue/iosched/KEY (e.g. slice_idle=0 for bfq)")
	flag.StringVar(&o.disk.layout, "io-layout", layoutSplit, "--disk loop: split (the modelled disk in two halves, a loop device and ext4 file system each, served by the one model: guaranteed sandboxes on one, revocable sandboxes on the other, given to the agent as --revocable-sandbox-dir, so that each has a journal of its own) or shared (one file system and journal for both, where a revocable writer holding a journal handle stalls the server's fsyncs)")
	diskMiB := flag.Int64("disk-mib", 2048, "--disk loop: the modelled disk's size, MiB (held in a tmpfs while a run lasts)")
	flag.Parse()
	o.disk.rate, o.disk.size = *diskRate*(1<<20), *diskMiB<<20
	if *iosched != "" {
		o.disk.iosched = strings.Split(*iosched, ",")
	}
	flag.Visit(func(f *flag.Flag) { o.rateSet = o.rateSet || f.Name == "rate" })
	if err := o.disk.validate(); err != nil {
		return err
	}
	o.agentFlags = flag.Args()
	if os.Geteuid() != 0 {
		return errors.New("needs root (the agent creates cgroups)")
	}
	var err error
	if o.scenarios, err = parseScenarios(scenarioNames); err != nil {
		return err
	}
	o.qosSets = qosSets
	if len(o.qosSets) == 0 {
		o.qosSets = []string{qos.DefaultControllers}
	}
	if o.repeat < 1 {
		return errors.New("--repeat must be at least 1")
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	// Not under /tmp: tasks get a private /tmp (and /var/tmp, /dev/shm)
	// of their own, where binaries built there are not found.
	dir, err := os.MkdirTemp("/var/lib", "slackline-colocation-")
	if err != nil {
		return err
	}
	cleanUpOnSignal()
	defer cleanup.unwind(cleanup.mark())
	cleanup.push(func() { _ = os.RemoveAll(dir) })
	// Tasks run as an unprivileged user: they must reach the binaries.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	o.binDir = dir
	if *prebuilt != "" {
		// Copied: tasks must reach them, wherever --bin is.
		for _, name := range benchBinaries {
			if err := copyExecutable(filepath.Join(*prebuilt, name), filepath.Join(dir, name)); err != nil {
				return fmt.Errorf("--bin: %w", err)
			}
		}
	} else if err := benchutil.Build(dir, "./cmd/slackline-coordinator", "./cmd/slackline-agent", "./cmd/slackline-supervisor", "./examples/batch-framework",
		"./scripts/bench/colocation/latency-server", "./scripts/bench/colocation/hog"); err != nil {
		return err
	}
	machine := describeMachine()
	fmt.Println(machine)

	if o.slice <= 0 || o.duration < 4*o.slice {
		return errors.New("--duration must hold at least four slices")
	}
	var results []runResult
	for rep := range o.repeat {
		for _, s := range o.scenarios {
			for _, set := range runOrder(rep, o.qosSets) {
				r, err := runOnce(o, rep, s, set, set)
				if err != nil {
					return fmt.Errorf("repetition %d, %s with %s: %w", rep+1, s.name, set, err)
				}
				results = append(results, r)
			}
		}
		if err := save(o.out, machine, results); err != nil {
			return err
		}
	}
	summary := summarize(o, results)
	for _, s := range o.scenarios {
		if err := drawScenario(filepath.Join(o.out, "colocation-"+s.name+".png"), s.name, results); err != nil {
			return err
		}
	}
	fmt.Println()
	fmt.Print(summary)
	fmt.Println("results and plots:", o.out)
	return nil
}

// benchBinaries are the binaries the benchmark runs, built or taken from
// --bin.
var benchBinaries = []string{"slackline-coordinator", "slackline-agent", "slackline-supervisor", "batch-framework", "latency-server", "hog"}

// copyExecutable copies an executable to dst, mode 0755.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// runOrder is the order of one repetition's runs of a scenario: noop
// first in even repetitions, last in odd ones, so that a drift of the
// host's conditions over a repetition (another tenant starting, the page
// cache warming) does not always favour the same configuration.
func runOrder(rep int, qosSets []string) []string {
	order := append([]string{"noop"}, qosSets...)
	if rep%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// save writes every result so far, so that an interrupted benchmark keeps
// what it measured.
func save(dir, machine string, results []runResult) error {
	data, err := json.MarshalIndent(struct {
		Machine string      `json:"machine"`
		Runs    []runResult `json:"runs"`
	}{machine, results}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.json"), data, 0o644)
}

// summarize computes, per scenario and QoS set, the medians and spreads of
// the per-run ratios, and prints the one-line summaries.
func summarize(o options, results []runResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %-40s %22s %22s %22s %22s %22s\n", "scenario", "qos", "p99 ratio (min-max)", "be share (min-max)", "of slack (min-max)", "be cores (min-max)", "R-N paired (min-max)")
	var lines []string
	for _, s := range o.scenarios {
		noop := collect(results, s.name, "noop")
		row := func(set string, c collected, paired []float64) {
			fmt.Fprintf(&b, "%-10s %-40s %22s %22s %22s %22s %22s\n", s.name, set, spread(c.ratio, "%.2fx"), spread(c.share, "%.2f"),
				spread(c.ofSlack, "%.2f"), spread(c.beCores, "%.2fc"), spread(paired, "%+.2f"))
		}
		row("noop", noop, nil)
		for _, set := range o.qosSets {
			c := collect(results, s.name, set)
			row(set, c, pairedDifferences(results, s.name, set))
			if o.quietHost > 0 {
				quiet := quietPairs(results, s.name, set, o.quietHost)
				row("noop, quiet pairs", collect(quiet, s.name, "noop"), nil)
				row(set+", quiet pairs", collect(quiet, s.name, set), pairedDifferences(quiet, s.name, set))
			}
			name := s.name
			if len(o.qosSets) > 1 {
				name += "," + set
			}
			share := math.NaN() // no run left idle CPU to share
			if len(c.share) > 0 {
				share = median(c.share)
			}
			lines = append(lines, fmt.Sprintf("colocation[%s]: lc_p99_ratio=%.2f be_share=%.2f noop_ratio=%.2f",
				name, median(c.ratio), share, median(noop.ratio)))
			if c.invalid+noop.invalid > 0 {
				lines = append(lines, fmt.Sprintf("colocation[%s]: NOT VALID runs left out: %d of %d with %s, %d of %d noop",
					name, c.invalid, c.invalid+len(c.ratio), set, noop.invalid, noop.invalid+len(noop.ratio)))
			}
		}
	}
	var p99s, idle []float64
	for _, r := range results {
		p99s = append(p99s, r.Alone.P99.Seconds()*1000)
		idle = append(idle, r.idleCores())
	}
	fmt.Fprintf(&b, "server alone (best-effort work frozen): p99 %s ms, idle %s cores, over %d runs\n\n", spread(p99s, "%.2f"), spread(idle, "%.2f"), len(p99s))
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	return b.String()
}

// quietPairs are the noop and set runs of the repetitions in which both
// runs' server waited at most maxHost per second behind other tenants
// ("host") with best-effort work frozen: on a shared machine, the pairs
// that other tenants left alone. The criterion does not look at the
// outcome, and a run's frozen phase is the same whatever QoS set runs.
func quietPairs(results []runResult, scenarioName, set string, maxHost time.Duration) []runResult {
	quiet := func(r runResult) bool {
		return r.Alone.Seconds > 0 && r.Alone.Delays["host"].Seconds()/r.Alone.Seconds <= maxHost.Seconds()
	}
	byRep := make(map[int][]runResult)
	for _, r := range results {
		if r.Scenario == scenarioName && (r.Config == "noop" || r.Config == set) {
			byRep[r.Rep] = append(byRep[r.Rep], r)
		}
	}
	var out []runResult
	for _, runs := range byRep {
		if len(runs) == 2 && quiet(runs[0]) && quiet(runs[1]) {
			out = append(out, runs...)
		}
	}
	slices.SortFunc(out, func(a, b runResult) int { return a.Rep - b.Rep })
	return out
}

// pairedDifferences is, per repetition, the set's ratio less the noop
// ratio of the same repetition: the two runs were made minutes apart, so
// the host's conditions that change from one repetition to the next cancel
// out of the difference where they would widen both ranges.
func pairedDifferences(results []runResult, scenarioName, set string) []float64 {
	noop := make(map[int]float64)
	for _, r := range results {
		if r.Scenario == scenarioName && r.Config == "noop" && r.Alone.P99 > 0 {
			noop[r.Rep] = r.ratio()
		}
	}
	var d []float64
	for _, r := range results {
		if n, ok := noop[r.Rep]; ok && r.Scenario == scenarioName && r.Config == set && r.Alone.P99 > 0 {
			d = append(d, r.ratio()-n)
		}
	}
	return d
}

// collected are one configuration's per-repetition values.
type collected struct {
	ratio, share, ofSlack, beCores []float64
	// invalid counts the runs left out (NOT VALID): the server alone failed
	// more than maxAloneErrors of its requests, or a run without QoS never
	// hit the node's memory limit (notCompeting).
	invalid int
}

func collect(results []runResult, scenarioName, set string) collected {
	var c collected
	for _, r := range results {
		if r.Scenario != scenarioName || r.Config != set || r.Alone.P99 <= 0 {
			continue
		}
		if saturated(r.Alone) || notCompeting(r) || queued(r.Alone, r.Rate) {
			c.invalid++
			continue
		}
		c.ratio = append(c.ratio, r.ratio())
		if share, ok := r.share(); ok {
			c.share = append(c.share, share)
		}
		if slack := r.slackCores(); slack > 0 {
			c.ofSlack = append(c.ofSlack, r.Shared.BECores/slack)
		}
		c.beCores = append(c.beCores, r.Shared.BECores)
	}
	return c
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread formats "median (min-max)".
func spread(vs []float64, format string) string {
	if len(vs) == 0 {
		return "-"
	}
	return fmt.Sprintf(format+" ("+format+"-"+format+")", median(vs), slices.Min(vs), slices.Max(vs))
}
