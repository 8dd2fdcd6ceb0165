package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/benchutil"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/cgrouptest/nodecgroup"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

// scenario is one kind of best-effort work.
type scenario struct {
	name    string
	tasks   int
	res     string
	command func(binDir string) string
	// serverRes and serverArgs override the server's resources and add to
	// its command line (memory: a large allocation whose unused part is the
	// memory slack; io: an fsync per request).
	serverRes, serverArgs string
	// share, when set, measures best-effort work's share of the resource
	// the scenario is about instead of idle CPU (see memoryShare, ioShare).
	share func(m resourceMeter) (float64, string, error)
	// holds is the memory the best-effort tasks hold once started (bytes,
	// all of them): the load waits until the revocable subtree holds it.
	// Filling 800 MiB at idle CPU priority on a loaded machine takes a
	// minute or more, and S measured before it ends says nothing of reclaim.
	holds uint64
	// minTasks, when set, is how many of the tasks must run before the
	// load (0: all of them): a scenario whose tasks fill whatever is
	// offered asks for more than any offer backs.
	minTasks int
	// writerAlone adds a third kind of slice (sliceWriterAlone, kindOf): the
	// load goes on but the server skips its disk I/O (requests "?nofsync":
	// the same CPU work and wakeups), and the same best-effort writers are
	// thawed with the agent's disk cap lifted for the slice (capLift): the
	// disk rate they get alone, measured in the same cycles, by the same
	// processes in the same cgroups and beside the same CPU load, as the
	// rate they keep beside the server's fsyncs (the io scenario's S).
	// Copies of the writers in a cgroup of the benchmark's own, thawed with
	// the load paused, measured the CPU instead, and so did the same
	// writers with the load paused (S 2.00 without QoS):
	// at idle CPU priority a writer's rate is set by the CPU it gets, not
	// by the disk (2.1 GiB/s at normal priority, 8-220 MiB/s at idle
	// priority beside other tenants' builds, from one 2 s window to the
	// next), and it gets about twice as much while a high-weight service
	// wakes 400 times a second beside it as while that service sleeps (a
	// CPU-only load, no disk I/O, gave 164 against 75 MiB/s over eight
	// cycles; the same writers in the bench without QoS 97 against 49).
	// diskProbe measures the disk's rate at normal priority, and the run
	// says whether the writers alone were disk-bound or got a share of the
	// CPU too small for the disk to matter.
	writerAlone bool
	// warmWrites is what the writers must have written before the load: a
	// full pass over their files (the first pass extends the files, which
	// is slower and, on v1, partly uncounted).
	warmWrites uint64
	// minSlices lengthens the load to at least this many slices: a
	// writer's rate at idle CPU priority on a shared host is set by the CPU
	// it gets, and varied tenfold from one 2 s window to the next (16-152
	// MiB/s), so the io scenario measures ten cycles, not five.
	minSlices int
	// nodeMiB, when set, bounds the node's memory: the agent's cgroup
	// root is a child of a cgroup of the benchmark's own (nodeCgroup) whose
	// memory limit is nodeMiB, so that best-effort work competes with the
	// server for it (the host's free memory, tens of GiB, otherwise leaves
	// them nothing to compete for).
	nodeMiB int
	// agentRes overrides the agent's --resources (default cpus:2;mem:4096).
	agentRes string
	// disk runs the scenario on the disk --disk chooses (the modelled
	// one by default): the run's directory, where the agent's sandboxes
	// are, is on it.
	disk bool
	// rate, when set, is the scenario's request rate unless --rate is
	// given (the io scenario's server fsyncs one request at a time).
	rate int
}

// sliceKind is what a slice of the load measures.
type sliceKind int

const (
	sliceAlone       sliceKind = iota // best-effort work frozen, the load on: the server alone
	sliceShared                       // best-effort work thawed, the load on
	sliceWriterAlone                  // the load on without the server's disk I/O, best-effort work thawed, its disk cap lifted
)

// kindOf is slice i's kind: alone and shared in turn; with writer-alone
// slices, alone, shared, alone, writer alone in turn, so that both slices
// in which writers are measured follow one in which they were frozen (a
// virtual disk's burst credit, refilled while it is quiet, then favours
// neither: in threes, the shared slices after a frozen one wrote 56-60
// MiB/s in the first cycle against 8-28 for the writer-alone ones after
// them).
func kindOf(i int, writerAlone bool) sliceKind {
	if writerAlone {
		return writerAloneCycle[i%len(writerAloneCycle)]
	}
	return sliceKind(i % 2)
}

// writerAloneCycle is the slices' order with writer-alone slices.
var writerAloneCycle = [...]sliceKind{sliceAlone, sliceShared, sliceAlone, sliceWriterAlone}

var scenarios = []scenario{
	{name: "cpu", tasks: 6, res: "cpus:0.25;mem:32", command: func(string) string { return `while :; do :; done` }},
	// Two 512 MiB buffers per task: about four times the largest L3 of
	// current server parts (and of this development machine's, 260 MiB).
	{name: "membw", tasks: 2, res: "cpus:0.5;mem:1200", command: func(bin string) string { return filepath.Join(bin, "hog") + " --mib 512" }},
	{name: "forkexec", tasks: 4, res: "cpus:0.25;mem:64", command: func(string) string { return `while :; do /bin/true; done` }},
	// A node whose memory is bounded at 1536 MiB (nodeMiB). The agent is
	// told it has 2048 (agentRes) and registers the 1536 its cgroup's
	// limit backs (#28: it used to register the 2048 and offer slack the
	// node could not back), all of it allocated to a server whose
	// requests read a 384 MiB page-cache working set (--cache-mib, read
	// twice at start so that it is a working set from the start: the
	// node's only reclaimable memory, there being no swap, so reclaim of
	// its pages costs the server disk reads). Best-effort tasks whose
	// memory grows and shrinks with little CPU, small enough that they
	// fill whatever memory slack is offered, as an analytics job's
	// executors do: each reserves 64 MiB, allocates 60 (dd's buffer,
	// filled once, held 20 s while dd blocks on a pipe nobody reads),
	// frees it and sleeps 1 s. The slack offered is the server's unused
	// allocation bounded by what the node holds beside the containers
	// and by what the QoS controllers keep free (the reclaim line and its
	// calm margin, 230 + 46 MiB here; none for noop, whose tasks then
	// hold enough to press the node: ~15 of them), so the framework asks
	// for 16 and the load waits for 8, fewer than any configuration's
	// offer backs. (Filling the buffer over and over instead took half a
	// core at idle priority: the ratio then measured CPU interference,
	// 4.6-5.5x; tasks that held their memory 4 s of every 6.5 held 0.38
	// of the slack even without QoS, so S measured their duty cycle; and
	// three tasks of 320 MiB either did not fit the offer that keeps the
	// reclaim line free or, launched before the server's cache counted as
	// its working set, held more than it and were frozen and killed.) S
	// is the memory best-effort work holds on average over the shared
	// slices over the memory slack the agent offers.
	{name: "memory", tasks: 16, minTasks: 8, res: "cpus:0.05;mem:64", agentRes: "cpus:2;mem:2048", serverRes: "cpus:2;mem:1536", serverArgs: "--cache-mib 384",
		share: memoryShare, nodeMiB: 1536,
		command: func(string) string {
			return `while :; do dd if=/dev/zero bs=60M count=1 2>/dev/null | sleep 20; sleep 1; done`
		}},
	// Two writers streaming 1 MiB blocks with O_DIRECT over 256 MiB files,
	// two writes in flight each (so that v1 blkio sees their writes, and
	// so that on a loaded machine they are bound by the disk, not by the
	// CPU they get at idle priority: dd copying /dev/zero wrote 1-9 MiB/s
	// there) beside a server that fsyncs 4 KiB per request. What is in
	// flight is kept small: a frozen writer's writes already queued in the
	// throttle still go out, and 4 x 16 MiB each took the whole 2 s frozen
	// slice to drain at a 66 MiB/s cap. 1 MiB, as dd bs=1M or a spill
	// file's writes, not 8: blk-throttle releases a capped write whole,
	// and the disk then serves it back to back, so the write's size is
	// how long every fsync beside it pays (8 MiB: 62 ms on the modelled
	// disk, during which a server that commits in turn falls behind);
	// fsync-interference.sh shows the size does not change what one
	// fsync pays (about 2 ms).
	//
	// 200 requests a second, not 400: each fsync on the modelled disk is
	// a chain of loop, FUSE and model round trips (4 KiB of data, then the
	// journal's blocks and commit with its flush), and on this 2-CPU
	// guest the server fsyncing one request at a time could not keep up
	// with 400 even alone (#28: p50 35-260 ms and p99 0.6-1.9 s with
	// best-effort work frozen, its queue built in the shared slices
	// draining in the alone ones), so p99s measured its queue; at 200 its
	// alone p50 was 5 ms.
	{name: "io", tasks: 2, res: "cpus:0.25;mem:128", serverArgs: "--fsync .", share: ioShare, writerAlone: true, disk: true, warmWrites: 2 * 256 << 20, minSlices: 40, rate: 200,
		command: func(bin string) string {
			return filepath.Join(bin, "hog") + " --write be.dat --mib 1 --file-mib 256 --depth 2"
		}},
}

func scenarioNamesList() []string {
	var names []string
	for _, s := range scenarios {
		names = append(names, s.name)
	}
	return names
}

func parseScenarios(list string) ([]scenario, error) {
	if list == "all" || list == "" {
		return scenarios, nil
	}
	var out []scenario
	for name := range strings.SplitSeq(list, ",") {
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == strings.TrimSpace(name) })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q: choose among %s", name, strings.Join(scenarioNamesList(), ", "))
		}
		out = append(out, scenarios[i])
	}
	return out, nil
}

// runResult is one run's outcome: the load generator runs once, and the
// best-effort tasks are frozen (cgroup.freeze) and thawed in alternate
// slices, so that the server alone and beside best-effort work are
// measured in the same minute, on the same agent, under the same
// background load.
type runResult struct {
	Rep      int           `json:"rep"`
	Scenario string        `json:"scenario"`
	Config   string        `json:"config"` // "noop" or the QoS controller set
	Mode     string        `json:"cgroup_mode"`
	CPUs     int           `json:"cpus"`
	Slice    time.Duration `json:"slice"`
	// Rate is the load's requests per second.
	Rate int `json:"rate"`
	// LoadStart is when the load began (the timeline's and the
	// correction log's zero), to line a run up with the host's logs.
	LoadStart time.Time `json:"load_start"`

	Alone  phase `json:"alone"`  // best-effort work frozen
	Shared phase `json:"shared"` // best-effort work running
	// WriterAlone is the writer-alone slices (the io scenario): its
	// BEWriteRate is best-effort writers' rate alone.
	WriterAlone *phase `json:"writer_alone,omitempty"`
	// WriteWindows is the write rate of each shared slice (best-effort
	// writers beside the server) and each writer-alone slice (the same
	// writers alone, uncapped), in order: S's spread.
	WriteWindows []writeWindow `json:"write_windows,omitempty"`
	// CapsLifted counts the writer-alone slices in which the agent's disk
	// cap was lifted, CapsRecapped those in which the agent set a cap of
	// its own meanwhile (the lower of the two was put back).
	CapsLifted   int `json:"caps_lifted,omitempty"`
	CapsRecapped int `json:"caps_recapped,omitempty"`
	// CapsRelifted counts the caps the agent set within writer-alone
	// slices that were lifted again (capLift.hold).
	CapsRelifted int `json:"caps_relifted,omitempty"`
	// DiskRate is the writers' command's rate at normal CPU priority,
	// measured before the load (diskProbe): the disk's rate, which
	// writers alone at idle priority reach only when they get the CPU.
	DiskRate float64 `json:"disk_write_bytes_per_second,omitempty"`
	// Disk names the disk the scenario ran on (--disk).
	Disk string `json:"disk,omitempty"`
	// NodeLimitHits is, where the scenario bounds the node's memory
	// (nodeMiB), how often the node's memory limit was hit during the load
	// (v1 memory.failcnt, v2 memory.events max): 0 means best-effort work
	// never competed with the server for memory.
	NodeLimitHits *uint64 `json:"node_memory_limit_hits,omitempty"`
	// NodeMinAvailableMiB is, where the scenario bounds the node's memory,
	// the least the node had available during the load (nodeAvailable,
	// sampled every 250 ms): with the agent registering only what the
	// limit backs (#28), best-effort work's peaks press the node toward
	// its limit without always reaching it.
	NodeMinAvailableMiB *float64 `json:"node_min_available_mib,omitempty"`

	// ResourceShare is, for the memory and io scenarios, best-effort work's
	// share of that resource (ResourceShareWhat says which); it is S.
	ResourceShare     *float64 `json:"resource_share,omitempty"`
	ResourceShareWhat string   `json:"resource_share_what,omitempty"`

	Corrections map[string]int `json:"corrections,omitempty"` // "controller kind" -> count
	// CorrectionLog lists each correction with its time since the load
	// started and its reason ("12.3s cpuset confine CPUs 1: ...").
	CorrectionLog []string `json:"correction_log,omitempty"`
	Timeline      []point  `json:"timeline"`
}

// phase is what was measured over the slices of one kind.
type phase struct {
	Seconds  float64       `json:"seconds"`
	Requests int           `json:"requests"`
	Errors   int           `json:"errors"`
	P50      time.Duration `json:"p50"`
	P99      time.Duration `json:"p99"`
	P999     time.Duration `json:"p999"`

	NodeBusy     float64 `json:"node_busy"` // fraction of all CPUs busy
	StealCores   float64 `json:"steal_cores"`
	IRQCores     float64 `json:"irq_cores"` // hard and soft interrupts (/proc/stat, tick-sampled)
	ServerCores  float64 `json:"server_cores"`
	LoadgenCores float64 `json:"loadgen_cores"`
	AgentCores   float64 `json:"agent_cores"` // the agent's own cgroup
	BECores      float64 `json:"be_cores"`
	// BEWriteRate is best-effort work's disk write rate (bytes per second;
	// the io scenario only).
	BEWriteRate float64 `json:"be_write_bytes_per_second,omitempty"`

	Throttled     uint64        `json:"revocable_nr_throttled"`
	Periods       uint64        `json:"revocable_nr_periods"`
	ThrottledTime time.Duration `json:"revocable_throttled_time"`

	// Delays is what kept the server's threads waiting for a CPU, by culprit
	// class (the agent's eBPF who-delayed-whom); RunqWait and Wakeups the
	// server's total run-queue wait and its count. Loadgen* are the same
	// for the load generator (a protected service).
	Delays          map[string]time.Duration `json:"server_delayed_by,omitempty"`
	RunqWait        time.Duration            `json:"server_runq_wait"`
	Wakeups         uint64                   `json:"server_wakeups"`
	LoadgenDelays   map[string]time.Duration `json:"loadgen_delayed_by,omitempty"`
	LoadgenRunqWait time.Duration            `json:"loadgen_runq_wait"`
	LoadgenWakeups  uint64                   `json:"loadgen_wakeups"`
}

// writeWindow is one slice's write rate: best-effort writers beside the
// server (Alone false) or alone, uncapped (Alone true).
type writeWindow struct {
	At    time.Duration `json:"at"` // the slice's start, from the load's
	Alone bool          `json:"alone"`
	Rate  float64       `json:"bytes_per_second"`
}

// ratio is the server's p99 beside best-effort work over its p99 alone.
func (r runResult) ratio() float64 {
	if r.Alone.P99 <= 0 {
		return 0
	}
	return float64(r.Shared.P99) / float64(r.Alone.P99)
}

// idleCores is what the node leaves idle while best-effort work is frozen,
// in cores (/proc/stat): on a machine of its own, what the server and its
// load generator leave; on a shared one, also less what other tenants use,
// which idle-priority best-effort work must leave them.
func (r runResult) idleCores() float64 { return float64(r.CPUs) * (1 - r.Alone.NodeBusy) }

// slackCores is what the server side leaves of the node's CPUs: the CPUs
// less what the server, its load generator and the agent use, whatever
// other tenants do.
func (r runResult) slackCores() float64 {
	return float64(r.CPUs) - r.Alone.ServerCores - r.Alone.LoadgenCores - r.Alone.AgentCores
}

// minIdleCores is the least idle CPU for which a share of it means
// anything: below it (other tenants keeping the CPUs busy) best-effort
// cores over idle cores is a quotient of noise.
const minIdleCores = 0.1

// capHoldInterval is how often a writer-alone slice lifts a cap the agent
// put back within it (capLift.hold): the writers run capped for at most
// this long at a time, 5% of a 2 s slice.
const capHoldInterval = 100 * time.Millisecond

// share is best-effort cores over the idle cores, and false when the node
// left less than minIdleCores idle.
func (r runResult) share() (float64, bool) {
	if r.ResourceShare != nil {
		return *r.ResourceShare, true
	}
	idle := r.idleCores()
	if idle < minIdleCores {
		return 0, false
	}
	return r.Shared.BECores / idle, true
}

// point is one second of a run, starting At: the p99 of requests scheduled
// in it, whether best-effort work ran, and the revocable subtree's CPU limit
// (cores, 0 = none) and CPUs at its end.
type point struct {
	At     time.Duration `json:"at"`
	P99    time.Duration `json:"p99"`
	Shared bool          `json:"shared"`
	Limit  float64       `json:"limit"`
	// IOLimit is the revocable subtree's disk I/O cap (bytes per second,
	// 0: none) on the writers' disk (the io scenario).
	IOLimit uint64 `json:"io_limit,omitempty"`
	CPUs    int    `json:"revocable_cpus"`
}

func runOnce(o options, rep int, s scenario, config, qosSet string) (runResult, error) {
	static, isStatic := strings.CutPrefix(qosSet, "static:")
	if isStatic {
		qosSet = "noop"
	}
	fmt.Printf("== repetition %d: %s, %s\n", rep+1, s.name, config)
	res := runResult{Rep: rep, Scenario: s.name, Config: config, CPUs: runtime.NumCPU()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Everything made below is undone when the run returns, or by the
	// signal handler if the benchmark is interrupted.
	defer cleanup.unwind(cleanup.mark())
	layout, err := cgroups.Detect(cgrouptest.Mountpoint)
	if err != nil {
		return res, err
	}
	res.Mode = string(layout.Mode)
	root := fmt.Sprintf("slackline-coloc-%d", time.Now().UnixNano()%1e9)
	workParent := "" // the default temporary directory: the host's disk
	// revocableDir, with the split layout, is the agent's
	// --revocable-sandbox-dir: the writers' sandboxes on a file system of
	// their own on the same disk.
	revocableDir := ""
	if s.disk && o.disk.kind == "loop" {
		d, err := startDisk(o, layout, root+"-disk")
		if err != nil {
			return res, err
		}
		workParent, revocableDir = d.Dir, d.RevocableDir
		res.Disk = fmt.Sprintf("%s (%s, scheduler %s)", o.disk, strings.Join(d.loops, " and "), d.Scheduler)
	} else if s.disk {
		res.Disk = "host disk (" + os.TempDir() + ")"
	}
	if res.Disk != "" {
		fmt.Printf("   disk: %s\n", res.Disk)
	}
	work, err := os.MkdirTemp(workParent, "colocation-run")
	if err != nil {
		return res, err
	}
	cleanup.push(func() { _ = os.RemoveAll(work) })
	coordAddr, agentAddr, serverAddr := benchutil.FreeAddr(), benchutil.FreeAddr(), benchutil.FreeAddr()
	loadgenCgroup := root + "-loadgen"
	cleanup.push(func() { removeRoot(layout, root) })
	// agentRoot is the agent's --cgroup-root: root itself, or its child
	// "node" when the scenario bounds the node's memory (root then holds
	// the limit; the agent's revocable subtree, beside its root, is also
	// under it).
	agentRoot := root
	if s.nodeMiB > 0 {
		if err := nodecgroup.Make(layout, root, uint64(s.nodeMiB)<<20); err != nil {
			return res, fmt.Errorf("bound the node's memory: %w", err)
		}
		agentRoot = root + "/node"
		fmt.Printf("   node memory bounded at %d MiB (the agent's cgroup root is under a cgroup of that limit)\n", s.nodeMiB)
	}
	cleanup.push(func() { removeCgroup(layout, loadgenCgroup) })
	if err := makeCgroup(layout, loadgenCgroup); err != nil {
		return res, err
	}
	var (
		procsMu sync.Mutex
		procs   []*exec.Cmd
	)
	cleanup.push(func() {
		procsMu.Lock()
		defer procsMu.Unlock()
		for _, p := range slices.Backward(procs) {
			_ = p.Process.Signal(syscall.SIGTERM)
			_ = p.Wait()
		}
	})
	startProc := func(name string, args ...string) error {
		p := exec.Command(filepath.Join(o.binDir, name), args...)
		logf, err := os.Create(filepath.Join(work, name+".log"))
		if err != nil {
			return err
		}
		p.Stdout, p.Stderr = logf, logf
		p.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err = p.Start()
		// The child has its own copy: the run's directory may be on the
		// modelled disk, which an open file would keep from unmounting.
		logf.Close()
		if err != nil {
			return err
		}
		procsMu.Lock()
		procs = append(procs, p)
		procsMu.Unlock()
		return nil
	}
	// --insecure: a loopback cluster of the benchmark's own, no credentials.
	if err := startProc("slackline-coordinator", "--listen", coordAddr, "--work-dir", filepath.Join(work, "coord"), "--insecure"); err != nil {
		return res, err
	}
	time.Sleep(300 * time.Millisecond)
	agentRes := "cpus:2;mem:4096"
	if s.agentRes != "" {
		agentRes = s.agentRes
	}
	agentArgs := append([]string{"--coordinator", "http://" + coordAddr, "--listen", agentAddr,
		"--work-dir", filepath.Join(work, "agent"), "--cgroup-root", agentRoot, "--resources", agentRes,
		"--qos-controller", qosSet, "--monitor-interval", "100ms", "--estimator-window", "10s",
		"--protect-cgroup", loadgenCgroup, "--ebpf-all-culprits", "--insecure"}, o.agentFlags...)
	if revocableDir != "" {
		agentArgs = append(agentArgs, "--revocable-sandbox-dir", revocableDir)
	}
	if err := startProc("slackline-agent", agentArgs...); err != nil {
		return res, err
	}

	// The latency-critical server: a guaranteed task holding the whole node,
	// so that what it leaves idle is slack (revocable), not unallocated.
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	launched := false
	var mu sync.Mutex
	fw, err := frameworkapi.New(frameworkapi.Config{Coordinator: "http://" + coordAddr, Logger: quiet,
		Framework: &slacklinev1.FrameworkInfo{Name: "latency-critical"}})
	if err != nil {
		return res, err
	}
	go fw.Run(ctx, frameworkapi.HandlerFuncs{OffersFunc: func(ctx context.Context, c *frameworkapi.Client, offers []*slacklinev1.Offer) {
		mu.Lock()
		defer mu.Unlock()
		for _, off := range offers {
			if launched {
				_ = c.Decline(ctx, []string{off.GetId()}, frameworkapi.Filters(3600))
				continue
			}
			launched = true
			cmd := fmt.Sprintf("%s --listen %s --work %s %s", filepath.Join(o.binDir, "latency-server"), serverAddr, o.work, s.serverArgs)
			serverRes := "cpus:2;mem:256"
			if s.serverRes != "" {
				serverRes = s.serverRes
			}
			task := frameworkapi.NewTask("server", "server", off, resources.MustParse(serverRes), &slacklinev1.CommandInfo{Value: cmd, Shell: true})
			_ = c.Launch(ctx, []string{off.GetId()}, []*slacklinev1.TaskInfo{task}, frameworkapi.Filters(3600))
		}
	}})
	node := slacklinev1connect.NewNodeServiceClient(server.NewClient(), "http://"+agentAddr)
	agentStarted := time.Now() // the agent was started just before
	if err := waitHTTP("http://"+serverAddr, o.serverStart); err != nil {
		return res, fmt.Errorf("server: %w%s", err, startDiagnosis(ctx, node, work))
	}
	fmt.Printf("   latency server answering %v after the agent's start\n", time.Since(agentStarted).Round(100*time.Millisecond))
	for _, rel := range []string{root, loadgenCgroup} {
		if err := setWeight(layout, rel, o.rootWeight); err != nil {
			return res, err
		}
	}
	// As long as the server may take to start, at least a minute: both
	// are slow in an emulated guest.
	if err := waitEBPFLoaded(ctx, node, max(time.Minute, o.serverStart)); err != nil {
		return res, err
	}
	fmt.Printf("   eBPF monitor loaded (or not loading) %v after the agent's start\n", time.Since(agentStarted).Round(100*time.Millisecond))
	if s.tasks > 0 {
		if err := startProc("batch-framework", "--coordinator", "http://"+coordAddr, "--name", "best-effort", "--revocable",
			"--tasks", strconv.Itoa(s.tasks), "--task-resources", s.res, "--command", s.command(o.binDir)); err != nil {
			return res, err
		}
		// An emulated guest takes minutes to launch them as well
		// (--server-start-timeout, when longer than a minute).
		running := s.tasks
		if s.minTasks > 0 {
			running = s.minTasks
		}
		if err := waitRevocable(ctx, node, running, max(60*time.Second, o.serverStart)); err != nil {
			return res, err
		}
		if isStatic {
			if err := applyStatic(layout, cgroups.Subtree(agentRoot, cgroups.Revocable), static); err != nil {
				return res, err
			}
		}
		// Let the controllers see the best-effort work before measuring.
		time.Sleep(3 * time.Second)
	}
	// The writers' disk: the one the agent caps, and whose bytes are
	// theirs (a half of the split disk also counts on the whole's loop
	// device).
	writersDev := ""
	if s.writerAlone {
		dev, err := diskOf(cmp.Or(revocableDir, work))
		if err != nil {
			fmt.Printf("   no disk found for the agent's sandboxes (%v): the writers' cap, if any, is not lifted alone\n", err)
		}
		writersDev = dev
	}
	rm := resourceMeter{layout: layout, node: node, revocable: cgroups.Subtree(agentRoot, cgroups.Revocable), dev: writersDev}
	if s.holds > 0 {
		if err := waitHeld(rm, s.holds, 5*time.Minute); err != nil {
			return res, err
		}
	}
	lift := &capLift{layout: layout, rel: cgroups.Subtree(agentRoot, cgroups.Revocable), dev: writersDev}
	if s.writerAlone {
		if err := warmWriters(layout, []string{lift.rel}, writersDev, s.warmWrites, 3*time.Minute); err != nil {
			return res, err
		}
		defer func() { _ = lift.restore() }()
		if err := freezeCgroup(layout, lift.rel, true); err != nil {
			return res, err
		}
		// Where the writers write: their file system's rate.
		probeDir := filepath.Join(cmp.Or(revocableDir, work), "disk-probe")
		if err := os.Mkdir(probeDir, 0o755); err != nil {
			return res, err
		}
		if res.DiskRate, err = diskProbe(layout, root+"-disk-probe", writersDev, probeDir, s.command(o.binDir), s.warmWrites/uint64(s.tasks), 3*time.Second); err != nil {
			return res, err
		}
		fmt.Printf("   disk: %.0f MiB/s for one writer at normal CPU priority, alone\n", res.DiskRate/(1<<20))
	}

	// The load generator: a process of its own in its own cgroup.
	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	duration := max(o.duration, time.Duration(s.minSlices)*o.slice)
	rate := o.rate
	if s.rate > 0 && !o.rateSet {
		rate = s.rate
	}
	res.Rate = rate
	lgArgs := []string{"loadgen", "--url", "http://" + serverAddr, "--rate", strconv.Itoa(rate), "--duration", duration.String()}
	if s.writerAlone {
		lgArgs = append(lgArgs, "--pause-slice", o.slice.String(), "--pause-every", strconv.Itoa(len(writerAloneCycle)), "--pause-at", "3", "--pause-query", "nofsync")
	}
	lg := exec.Command(self, lgArgs...)
	lg.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	lg.Stderr = os.Stderr
	stdin, err := lg.StdinPipe()
	if err != nil {
		return res, err
	}
	stdout, err := lg.StdoutPipe()
	if err != nil {
		return res, err
	}
	if err := lg.Start(); err != nil {
		return res, err
	}
	cleanup.push(func() {
		// On an early return it may still wait for its start line.
		_ = lg.Process.Kill()
		_ = lg.Wait()
	})
	if err := joinCgroup(layout, loadgenCgroup, lg.Process.Pid); err != nil {
		_ = lg.Process.Kill()
		return res, err
	}

	rel := func(sub string) string {
		if sub == "revocable" {
			return cgroups.Subtree(agentRoot, cgroups.Revocable)
		}
		return filepath.Join(agentRoot, sub)
	}
	serverID := ""
	m := meter{layout: layout, node: node, serverID: &serverID, loadgen: loadgenCgroup, rel: rel}
	if s.writerAlone {
		m.written = rm.writtenBytes
	}
	kind := func(i int) sliceKind { return kindOf(i, s.writerAlone) }
	// setSlice freezes or thaws best-effort work for slice i, and lifts
	// its disk cap for a writer-alone slice (putting it back after one),
	// with best-effort work frozen across the change.
	setSlice := func(i int) error {
		if err := freezeCgroup(layout, rel("revocable"), true); err != nil {
			return err
		}
		if err := lift.restore(); err != nil {
			return fmt.Errorf("put the disk cap back: %w", err)
		}
		if kind(i) == sliceWriterAlone {
			if err := lift.lift(); err != nil {
				return fmt.Errorf("lift the disk cap: %w", err)
			}
		}
		if kind(i) == sliceAlone {
			return nil
		}
		return freezeCgroup(layout, rel("revocable"), false)
	}
	var freezeErr error // the first failure to freeze or thaw, read after the slices end
	// Slices go in turn (kindOf), best-effort work frozen first (slice 0);
	// the last one ends with the load. The load generator schedules its
	// requests from the moment it reads its start line, within a
	// millisecond of start.
	var alone, shared, writerAlone phase
	nSlices := int((duration + o.slice - 1) / o.slice)
	sliceDone := make(chan struct{})
	stopSlices := make(chan struct{})
	if err := setSlice(0); err != nil {
		return res, fmt.Errorf("freeze best-effort work: %w", err)
	}
	var hitsBefore uint64
	if s.nodeMiB > 0 {
		if hitsBefore, err = nodeLimitHits(layout, root); err != nil {
			return res, err
		}
	}
	prev := m.snapshot(ctx)
	timeline := sampleTimeline(layout, rel("revocable"), lift.dev)
	start := time.Now()
	res.LoadStart = start
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		return res, err
	}
	go func() {
		defer close(sliceDone)
		for k := 1; k <= nSlices; k++ {
			end := min(time.Duration(k)*o.slice, duration)
			select {
			case <-time.After(time.Until(start.Add(end))):
			case <-stopSlices:
				return
			}
			now := m.snapshot(ctx)
			at, dt := prev.at.Sub(start), now.at.Sub(prev.at).Seconds()
			switch kind(k - 1) {
			case sliceAlone:
				prev.addTo(&alone, now)
			case sliceShared:
				prev.addTo(&shared, now)
				if s.writerAlone {
					res.WriteWindows = append(res.WriteWindows, writeWindow{At: at, Rate: float64(now.beWritten-prev.beWritten) / dt})
				}
			case sliceWriterAlone:
				prev.addTo(&writerAlone, now)
				res.WriteWindows = append(res.WriteWindows, writeWindow{At: at, Alone: true, Rate: float64(now.beWritten-prev.beWritten) / dt})
			}
			if k < nSlices {
				if err := setSlice(k); err != nil && freezeErr == nil {
					freezeErr = err
				}
			}
			prev = now
		}
	}()
	// Through each writer-alone slice the cap stays lifted: an agent that
	// caps revocable I/O from the start where guaranteed work does disk
	// I/O puts one back within the slice (capLift.hold).
	holdDone := make(chan struct{})
	go func() {
		defer close(holdDone)
		if !s.writerAlone {
			return
		}
		everyTick(capHoldInterval, stopSlices, sliceDone, func(now time.Time) {
			if kind(int(now.Sub(start)/o.slice)) != sliceWriterAlone {
				return
			}
			if err := lift.hold(); err != nil {
				fmt.Printf("   keeping the disk cap lifted: %v\n", err)
			}
		})
	}()
	// The memory best-effort work holds, sampled through the shared
	// slices (S of a scenario whose best-effort memory grows and shrinks).
	heldDone := make(chan struct{})
	var heldSum, heldN float64
	minAvailable := uint64(math.MaxUint64)
	if s.nodeMiB > 0 {
		go func() {
			defer close(heldDone)
			everyTick(250*time.Millisecond, stopSlices, sliceDone, func(now time.Time) {
				if avail, err := nodeAvailable(layout, root, uint64(s.nodeMiB)<<20); err == nil {
					minAvailable = min(minAvailable, avail)
				}
				at := now.Sub(start)
				if kind(int(at/o.slice)) != sliceShared || at%o.slice < 200*time.Millisecond {
					return
				}
				if held, err := rm.heldBytes(); err == nil {
					heldSum += float64(held)
					heldN++
				}
			})
		}()
	} else {
		close(heldDone)
	}
	var report loadReport
	err = json.NewDecoder(stdout).Decode(&report)
	if err != nil {
		close(stopSlices)
	}
	<-sliceDone
	<-heldDone
	<-holdDone
	if heldN > 0 {
		rm.heldShared = heldSum / heldN
	}
	if s.nodeMiB > 0 {
		hits, hitsErr := nodeLimitHits(layout, root)
		if hitsErr != nil {
			return res, hitsErr
		}
		hits -= min(hits, hitsBefore)
		res.NodeLimitHits = &hits
		if minAvailable != math.MaxUint64 {
			mib := float64(minAvailable) / (1 << 20)
			res.NodeMinAvailableMiB = &mib
		}
	}
	if err := lift.restore(); err != nil && freezeErr == nil {
		freezeErr = err
	}
	res.CapsLifted, res.CapsRecapped, res.CapsRelifted = lift.Lifted, lift.Recapped, lift.Relifted
	if thawErr := freezeCgroup(layout, rel("revocable"), false); freezeErr == nil {
		freezeErr = thawErr
	}
	if err != nil {
		return res, fmt.Errorf("load generator: %w", err)
	}
	if freezeErr != nil {
		return res, fmt.Errorf("freeze or thaw best-effort work: %w", freezeErr)
	}
	res.Slice = o.slice
	res.Timeline = timeline()
	classes := containerClasses(ctx, node)
	res.Corrections, res.CorrectionLog = correctionCounts(ctx, node, start)

	// Requests by the slice of their scheduled time; the first settle of
	// each slice is left out (best-effort work waking up or going still).
	const settle = 200 * time.Millisecond
	var lat [2][]time.Duration
	errs := [2]int{}
	perSecond := make([][]time.Duration, len(res.Timeline))
	for i, us := range report.LatencyMicros {
		at := time.Duration(i) * time.Second / time.Duration(rate)
		k := int(at / o.slice)
		if sec := int(at / time.Second); sec < len(perSecond) && us >= 0 {
			perSecond[sec] = append(perSecond[sec], time.Duration(us)*time.Microsecond)
		}
		kk := kind(k)
		if at-time.Duration(k)*o.slice < settle || us == notSent || kk == sliceWriterAlone {
			continue
		}
		if us < 0 {
			errs[kk]++
			continue
		}
		lat[kk] = append(lat[kk], time.Duration(us)*time.Microsecond)
	}
	for i := range res.Timeline {
		// Point i is second i of the load (its limit and CPUs sampled at
		// the second's end).
		res.Timeline[i].At = time.Duration(i) * time.Second
		res.Timeline[i].P99 = pct(perSecond[i], 0.99)
		res.Timeline[i].Shared = kind(int(res.Timeline[i].At/o.slice)) == sliceShared
	}
	for k, ph := range []*phase{&alone, &shared} {
		ph.Requests, ph.Errors = len(lat[k])+errs[k], errs[k]
		ph.P50, ph.P99, ph.P999 = pct(lat[k], 0.50), pct(lat[k], 0.99), pct(lat[k], 0.999)
		ph.finish()
		ph.Delays, ph.LoadgenDelays = byClass(ph.Delays, classes), byClass(ph.LoadgenDelays, classes)
	}
	res.Alone, res.Shared = alone, shared
	if s.writerAlone {
		writerAlone.finish()
		res.WriterAlone = &writerAlone
		rm.ioShared, rm.ioAlone, rm.windows = shared.BEWriteRate, writerAlone.BEWriteRate, res.WriteWindows
		fmt.Printf("   writer-alone slices: the agent's disk cap lifted in %d, set anew by the agent within %d (the lower cap put back; %d caps lifted again within a slice)\n", res.CapsLifted, res.CapsRecapped, res.CapsRelifted)
		if res.DiskRate > 0 {
			bound := "CPU-bound: their rate is set by the CPU they get at idle priority beside other tenants more than by the disk"
			if writerAlone.BEWriteRate >= res.DiskRate/2 {
				bound = "disk-bound"
			}
			fmt.Printf("   writers alone %.0f MiB/s, one writer at normal priority %.0f MiB/s: %s\n", writerAlone.BEWriteRate/(1<<20), res.DiskRate/(1<<20), bound)
		}
	}
	if s.share != nil {
		v, what, err := s.share(rm)
		if err != nil {
			return res, err
		}
		res.ResourceShare, res.ResourceShareWhat = &v, what
		fmt.Printf("   best-effort %s: %.2f\n", what, v)
	}
	for _, ph := range []struct {
		name string
		p    phase
	}{{"alone", alone}, {"beside best-effort", shared}} {
		p := ph.p
		fmt.Printf("   %-18s p50 %v p99 %v p99.9 %v errors %d | node %.0f%% server %.2fc loadgen %.2fc agent %.3fc best-effort %.2fc steal %.3fc irq %.3fc | throttled %d/%d periods (%v)\n",
			ph.name, p.P50, p.P99, p.P999, p.Errors, 100*p.NodeBusy, p.ServerCores, p.LoadgenCores, p.AgentCores, p.BECores, p.StealCores, p.IRQCores,
			p.Throttled, p.Periods, p.ThrottledTime.Round(time.Millisecond))
		for _, w := range []struct {
			who     string
			wait    time.Duration
			wakeups uint64
			delays  map[string]time.Duration
		}{{"server", p.RunqWait, p.Wakeups, p.Delays}, {"load generator", p.LoadgenRunqWait, p.LoadgenWakeups, p.LoadgenDelays}} {
			if w.wakeups > 0 {
				fmt.Printf("      %s run-queue wait %v over %d wakeups (%v each); delayed by %s\n", w.who, w.wait.Round(time.Millisecond), w.wakeups,
					(w.wait / time.Duration(w.wakeups)).Round(100*time.Nanosecond), formatDelays(w.delays))
			}
		}
	}
	if res.ResourceShare != nil {
		fmt.Printf("   p99 ratio %.2fx, best-effort share %.2f (%s)\n", res.ratio(), *res.ResourceShare, res.ResourceShareWhat)
	} else if share, ok := res.share(); ok {
		fmt.Printf("   p99 ratio %.2fx, best-effort share %.2f of %.2f idle cores\n", res.ratio(), share, res.idleCores())
	} else {
		fmt.Printf("   p99 ratio %.2fx, best-effort share undefined: %.2f idle cores (other tenants), %.2f of slack\n",
			res.ratio(), res.idleCores(), res.Shared.BECores/res.slackCores())
	}
	if res.NodeLimitHits != nil {
		fmt.Printf("   the node's memory limit was hit %d times during the load\n", *res.NodeLimitHits)
		if res.NodeMinAvailableMiB != nil {
			fmt.Printf("   the node had at least %.0f MiB available during the load\n", *res.NodeMinAvailableMiB)
		}
	}
	if notCompeting(res) {
		fmt.Printf("   NOT VALID: without QoS the node's memory limit was never hit and it always had more than %d MiB available during the load: best-effort work did not compete with the server for memory; left out of the summary's medians\n", pressedMiB)
	} else if queued(res.Alone, rate) {
		fmt.Printf("   NOT VALID: the server alone had p50 %v, over %v (%d requests' spacing at %d a second): its requests queue behind each other with best-effort work frozen, so its p99s measure its queue, not interference; left out of the summary's medians\n",
			res.Alone.P50, queuedP50(rate), queuedRequests, rate)
	} else if saturated(res.Alone) {
		fmt.Printf("   NOT VALID: the server alone failed %d of %d requests (it cannot keep up with --rate on this host: with --fsync, one fsync at a time, each must take under 1/rate): its p99 and the ratio measure its queue; left out of the summary's medians\n",
			res.Alone.Errors, res.Alone.Requests)
	} else {
		fmt.Printf("   valid: the server alone failed %d of %d requests (at most %.0f%%)\n", res.Alone.Errors, res.Alone.Requests, 100*maxAloneErrors)
	}
	if len(res.Corrections) > 0 {
		fmt.Printf("   corrections: %v\n", res.Corrections)
		for _, c := range res.CorrectionLog {
			fmt.Printf("      %s\n", c)
		}
	}
	return res, nil
}

// applyStatic sets one mechanism on the revocable subtree for the whole run,
// with the agent's QoS off (--qos static:...): "cpus=1-3" confines it to
// those CPUs, "quota=0.5" caps it at half a core, "period=10ms" sets the CFS
// period of that cap (default 100 ms); comma-separated. The study compares
// mechanisms this way, apart from the controllers that choose among them.
func applyStatic(l cgroups.Layout, rel, spec string) error {
	var quota float64
	var period time.Duration
	for kv := range strings.SplitSeq(spec, ",") {
		key, value, _ := strings.Cut(kv, "=")
		switch key {
		case "cpus":
			cpus, err := cgroups.ParseCPUList(value)
			if err != nil {
				return err
			}
			if err := l.SetCPUs(rel, cpus); err != nil {
				return err
			}
		case "quota":
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return fmt.Errorf("static quota %q: %w", value, err)
			}
			quota = v
		case "period":
			d, err := time.ParseDuration(value)
			if err != nil {
				return fmt.Errorf("static period %q: %w", value, err)
			}
			period = d
		default:
			return fmt.Errorf("static mechanism %q: want cpus=, quota= or period=", kv)
		}
	}
	if quota > 0 {
		return l.SetCPULimit(rel, quota, period)
	}
	return nil
}

// meter takes the snapshots a phase is the sum of differences of.
type meter struct {
	layout   cgroups.Layout
	node     slacklinev1connect.NodeServiceClient
	serverID *string
	loadgen  string
	rel      func(string) string
	// written, when set, reads best-effort work's cumulative disk writes
	// (the io scenario).
	written func() (ioSample, error)
}

// snapshot is the counters at one moment.
type snapshot struct {
	at                         time.Time
	cpu                        procStat
	server, be, loadgen, agent float64
	throttle                   throttleStat
	serverUsage, loadgenUsage  serverUsage
	beWritten                  uint64 // best-effort work's disk writes (bytes), when metered
}

func (m meter) snapshot(ctx context.Context) snapshot {
	s := snapshot{at: time.Now(), cpu: readProcStat(), throttle: throttling(m.layout, m.rel("revocable"))}
	s.server, s.be = cgroupCPU(m.layout, m.rel("guaranteed")), cgroupCPU(m.layout, m.rel("revocable"))
	s.loadgen, s.agent = cgroupCPU(m.layout, m.loadgen), cgroupCPU(m.layout, m.rel("agent"))
	s.serverUsage, s.loadgenUsage = usageOf(ctx, m.node, m.serverID)
	if m.written != nil {
		if w, err := m.written(); err == nil {
			s.beWritten = w.bytes
		}
	}
	return s
}

// addTo adds what happened from s to now to the phase (sums of seconds and
// CPU-seconds; finish turns them into rates).
func (s snapshot) addTo(p *phase, now snapshot) {
	wall := now.at.Sub(s.at).Seconds()
	p.Seconds += wall
	busy := now.cpu.busyFraction(s.cpu)
	p.NodeBusy += busy * wall
	p.StealCores += now.cpu.cores(s.cpu, statSteal, wall) * wall
	p.IRQCores += (now.cpu.cores(s.cpu, statIRQ, wall) + now.cpu.cores(s.cpu, statSoftIRQ, wall)) * wall
	p.ServerCores += now.server - s.server
	p.BECores += now.be - s.be
	p.LoadgenCores += now.loadgen - s.loadgen
	p.AgentCores += now.agent - s.agent
	p.BEWriteRate += float64(now.beWritten - s.beWritten)
	p.Periods += now.throttle.periods - s.throttle.periods
	p.Throttled += now.throttle.throttled - s.throttle.throttled
	p.ThrottledTime += now.throttle.time - s.throttle.time
	d, w, n := now.serverUsage.since(s.serverUsage)
	p.Delays = addDelays(p.Delays, d)
	p.RunqWait += w
	p.Wakeups += n
	d, w, n = now.loadgenUsage.since(s.loadgenUsage)
	p.LoadgenDelays = addDelays(p.LoadgenDelays, d)
	p.LoadgenRunqWait += w
	p.LoadgenWakeups += n
}

// maxAloneErrors is the share of failed requests with best-effort work
// frozen above which the server is saturated by the load alone (requests
// time out in its queue) and the run's p99s say nothing of best-effort
// work: the io scenario's server, fsyncing one request at a time at 400
// a second, failed 8,000-14,000 of 16,000 while the host's fsyncs took
// 25 ms on average.
const maxAloneErrors = 0.01

// queuedRequests is how many requests' spacing the server's p50 alone may
// reach before the run counts as measuring its queue: a request that
// waits for the ones before it as a rule, not as an exception.
const queuedRequests = 4

// queuedP50 is the p50 alone beyond which the server is queueing at rate
// requests a second.
func queuedP50(rate int) time.Duration {
	return queuedRequests * time.Second / time.Duration(rate)
}

// queued says whether the server's p50 alone (best-effort work frozen)
// was beyond queuedP50: it could not keep up with the load by itself.
func queued(alone phase, rate int) bool {
	return rate > 0 && alone.P50 > queuedP50(rate)
}

// saturated says whether the server failed more than maxAloneErrors of its
// requests alone.
func saturated(alone phase) bool {
	return alone.Requests > 0 && float64(alone.Errors) > maxAloneErrors*float64(alone.Requests)
}

// pressedMiB is how little available memory counts as best-effort work
// competing with the server for the node's memory: the reclaim
// controller's critical byte line (256 MiB; on the memory scenario's
// 1.5 GiB node its lines are now 230 MiB to reclaim and 115 MiB to
// freeze, ByteLineCap scaling them with the node). Without QoS the
// slack offered keeps no line free (#28), and best-effort work holding
// it leaves the node ~90 MiB: a competition.
const pressedMiB = 256

// notCompeting says whether a run of a scenario that bounds the node's
// memory measured no competition: without QoS (which may keep best-effort
// work from reaching it: that is what it is for), the node's memory limit
// was never hit and the node always had more than pressedMiB available.
// Since the agent registers only the memory the node's limit backs and
// its slack estimate leaves the node's other use free (#28), best-effort
// work holding its whole slack brings the node close to its limit
// without always crossing it.
func notCompeting(r runResult) bool {
	if r.Config != "noop" || r.NodeLimitHits == nil || *r.NodeLimitHits > 0 {
		return false
	}
	return r.NodeMinAvailableMiB == nil || *r.NodeMinAvailableMiB > pressedMiB
}

// finish turns the phase's sums into rates.
func (p *phase) finish() {
	if p.Seconds <= 0 {
		return
	}
	p.NodeBusy /= p.Seconds
	p.StealCores /= p.Seconds
	p.IRQCores /= p.Seconds
	p.ServerCores /= p.Seconds
	p.BECores /= p.Seconds
	p.LoadgenCores /= p.Seconds
	p.AgentCores /= p.Seconds
	p.BEWriteRate /= p.Seconds
}

func addDelays(into, d map[string]time.Duration) map[string]time.Duration {
	if into == nil {
		into = map[string]time.Duration{}
	}
	for k, v := range d {
		into[k] += v
	}
	return into
}

func pct(ds []time.Duration, p float64) time.Duration {
	return benchutil.Percentile(ds, p, 10*time.Microsecond)
}

func formatDelays(d map[string]time.Duration) string {
	if len(d) == 0 {
		return "-"
	}
	names := make([]string, 0, len(d))
	for n := range d {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return int(d[b] - d[a]) })
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %v", n, d[n].Round(100*time.Microsecond)))
	}
	return strings.Join(parts, ", ")
}

func waitHTTP(url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not answering at %s after %v", url, timeout)
}

// startDiagnosis says why a latency server may not have answered: the
// agent's containers and their states, its eBPF monitor's status, and the
// last lines of the agent's and the coordinator's logs (the run's work
// directory is removed when it ends, so they are printed here).
func startDiagnosis(ctx context.Context, node slacklinev1connect.NodeServiceClient, work string) string {
	var b strings.Builder
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if resp, err := node.GetContainers(ctx, connect.NewRequest(&slacklinev1.GetContainersRequest{})); err != nil {
		fmt.Fprintf(&b, "\n   agent GetContainers: %v", err)
	} else {
		fmt.Fprintf(&b, "\n   agent containers: %d", len(resp.Msg.GetContainers()))
		for _, c := range resp.Msg.GetContainers() {
			fmt.Fprintf(&b, "\n     %s task %s %v revocable=%v pid %d", c.GetContainerId(), c.GetTaskId(), c.GetState(), c.GetRevocable(), c.GetPid())
		}
	}
	if resp, err := node.GetFeatures(ctx, connect.NewRequest(&slacklinev1.GetFeaturesRequest{})); err != nil {
		fmt.Fprintf(&b, "\n   agent GetFeatures: %v", err)
	} else {
		for _, f := range resp.Msg.GetFeatures() {
			if f.GetName() == "ebpf_monitor" {
				fmt.Fprintf(&b, "\n   agent ebpf_monitor: %v %s", f.GetStatus(), f.GetDetail())
			}
		}
	}
	for _, name := range []string{"slackline-agent", "slackline-coordinator"} {
		raw, err := os.ReadFile(filepath.Join(work, name+".log"))
		if err != nil {
			fmt.Fprintf(&b, "\n   %s log: %v", name, err)
			continue
		}
		lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
		const tail = 25
		fmt.Fprintf(&b, "\n   %s log, last %d of %d lines:", name, min(tail, len(lines)), len(lines))
		for _, l := range lines[max(0, len(lines)-tail):] {
			b.WriteString("\n     " + l)
		}
	}
	return b.String()
}

// waitRevocable waits until n revocable containers run.
func waitRevocable(ctx context.Context, node slacklinev1connect.NodeServiceClient, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	running := 0
	for time.Now().Before(deadline) {
		resp, err := node.GetContainers(ctx, connect.NewRequest(&slacklinev1.GetContainersRequest{}))
		if err == nil {
			running = 0
			for _, c := range resp.Msg.GetContainers() {
				if c.GetRevocable() && c.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
					running++
				}
			}
			if running >= n {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%d of %d best-effort tasks running after %v", running, n, timeout)
}

// waitEBPFLoaded waits until the agent's eBPF monitor, loaded after the
// agent registers, is loaded or failed (GetFeatures' ebpf_monitor is no
// longer loading), so that the scenario measures with it.
func waitEBPFLoaded(ctx context.Context, node slacklinev1connect.NodeServiceClient, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		resp, err := node.GetFeatures(ctx, connect.NewRequest(&slacklinev1.GetFeaturesRequest{}))
		if err == nil {
			loading := false // no ebpf_monitor feature: --ebpf=false
			for _, f := range resp.Msg.GetFeatures() {
				loading = loading || f.GetName() == "ebpf_monitor" && f.GetStatus() == slacklinev1.FeatureStatus_FEATURE_STATUS_LOADING
			}
			if !loading {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the agent's eBPF monitor still loading after %v", timeout)
}

// serverUsage is a container's cumulative eBPF counters; ok is false when
// the agent did not report them.
type serverUsage struct {
	ok       bool
	delays   map[string]time.Duration
	runqWait time.Duration
	wakeups  uint64
}

// since is what happened from before to u; nothing unless both were read
// (a failed read must not count as counters going back to zero).
func (u serverUsage) since(before serverUsage) (map[string]time.Duration, time.Duration, uint64) {
	out := map[string]time.Duration{}
	if !u.ok || !before.ok || u.wakeups < before.wakeups {
		return out, 0, 0
	}
	for k, v := range u.delays {
		if d := v - before.delays[k]; d > 0 {
			out[k] = d
		}
	}
	return out, u.runqWait - before.runqWait, u.wakeups - before.wakeups
}

// usageOf reads the counters of the server container (id, found on the
// first call: the only guaranteed task) and of the load generator (the
// protected service: no task) from the agent.
func usageOf(ctx context.Context, node slacklinev1connect.NodeServiceClient, id *string) (server, loadgen serverUsage) {
	server, loadgen = serverUsage{delays: map[string]time.Duration{}}, serverUsage{delays: map[string]time.Duration{}}
	if *id == "" {
		resp, err := node.GetContainers(ctx, connect.NewRequest(&slacklinev1.GetContainersRequest{}))
		if err != nil {
			return server, loadgen
		}
		for _, c := range resp.Msg.GetContainers() {
			if !c.GetRevocable() {
				*id = c.GetTaskId()
			}
		}
	}
	resp, err := node.GetUsage(ctx, connect.NewRequest(&slacklinev1.GetUsageRequest{}))
	if err != nil {
		return server, loadgen
	}
	for _, cu := range resp.Msg.GetUsage() {
		var u *serverUsage
		switch cu.GetTaskId() {
		case "":
			u = &loadgen
		case *id:
			u = &server
		default:
			continue
		}
		st := cu.GetStatistics()
		if st == nil {
			continue
		}
		u.ok = true
		u.wakeups = st.GetRunqueue().GetWakeups()
		u.runqWait = secs(st.GetRunqueue().GetTotalSecs())
		for _, d := range st.GetDelayedBy() {
			u.delays[d.GetCulprit()] += secs(d.GetSecs())
		}
		if len(st.GetDelayedBy()) == 0 && st.GetDelayedByRevocableSecs() > 0 {
			u.delays["revocable"] = secs(st.GetDelayedByRevocableSecs())
		}
	}
	return server, loadgen
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// containerClasses maps container ids to "server" (guaranteed) or
// "revocable"; protected services are named "protected:<cgroup>" already.
func containerClasses(ctx context.Context, node slacklinev1connect.NodeServiceClient) map[string]string {
	out := map[string]string{}
	resp, err := node.GetContainers(ctx, connect.NewRequest(&slacklinev1.GetContainersRequest{}))
	if err != nil {
		return out
	}
	for _, c := range resp.Msg.GetContainers() {
		out[c.GetContainerId()] = "server"
		if c.GetRevocable() {
			out[c.GetContainerId()] = "revocable"
		}
	}
	return out
}

// byClass sums delays by culprit class: containers become "server" or
// "revocable" (a revocable task killed meanwhile too), the protected load
// generator "load generator"; "agent", "host", "kernel" and the others stay.
func byClass(delays map[string]time.Duration, classes map[string]string) map[string]time.Duration {
	out := map[string]time.Duration{}
	for culprit, d := range delays {
		name := culprit
		switch {
		case classes[culprit] != "":
			name = classes[culprit]
		case strings.HasPrefix(culprit, "protected:"):
			name = "load generator"
		case len(culprit) == 32 && !strings.ContainsAny(culprit, ":/ "):
			name = "revocable" // a container that is gone: killed best-effort work
		}
		out[name] += d
	}
	return out
}

// correctionCounts counts the corrections the agent applied, by controller
// and kind, and lists them with their time since start and reason.
func correctionCounts(ctx context.Context, node slacklinev1connect.NodeServiceClient, start time.Time) (map[string]int, []string) {
	resp, err := node.GetCorrections(ctx, connect.NewRequest(&slacklinev1.GetCorrectionsRequest{}))
	if err != nil {
		return nil, nil
	}
	out := map[string]int{}
	var log []string
	for _, c := range resp.Msg.GetCorrections() {
		kind := strings.ToLower(strings.TrimPrefix(c.GetKind().String(), "CORRECTION_KIND_"))
		out[c.GetController()+" "+kind]++
		target := ""
		switch {
		case c.GetCpus() != "":
			target = " CPUs " + c.GetCpus()
		case c.GetKind() == slacklinev1.CorrectionKind_CORRECTION_KIND_CONFINE:
			target = " every CPU"
		case c.GetCpuLimit() > 0:
			target = fmt.Sprintf(" %.2f cores", c.GetCpuLimit())
		}
		at := c.GetTimestamp().AsTime().Sub(start).Round(100 * time.Millisecond)
		log = append(log, fmt.Sprintf("%v %s %s%s: %s", at, c.GetController(), kind, target, c.GetReason()))
	}
	return out, log
}

// makeCgroup creates a cgroup outside the agent's root for the load
// generator: in the v2 tree, and on hybrid hosts in the v1 cpu hierarchy.
func makeCgroup(l cgroups.Layout, rel string) error {
	for _, dir := range l.PathsOf(rel).Dirs() {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// setWeight gives a cgroup factor times the default CPU weight.
func setWeight(l cgroups.Layout, rel string, factor float64) error {
	file, value := filepath.Join(l.Unified, rel, "cpu.weight"), strconv.FormatUint(cgroups.CPUWeight(factor), 10)
	if l.Mode == cgroups.ModeHybrid {
		file, value = filepath.Join(l.CPU, rel, "cpu.shares"), strconv.FormatUint(min(cgroups.CPUShares(factor), 262144), 10)
	}
	if err := os.WriteFile(file, []byte(value), 0); err != nil {
		return fmt.Errorf("weight of %s: %w", rel, err)
	}
	return nil
}

func joinCgroup(l cgroups.Layout, rel string, pid int) error {
	for _, file := range l.PathsOf(rel).ProcsFiles() {
		if err := os.WriteFile(file, []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("move the load generator into %s: %w", file, err)
		}
	}
	return nil
}

// removeRoot removes the agent's cgroup root and revocable subtree, trying
// again for up to 3 minutes: killed writers with direct I/O in flight under
// a cap leave their cgroups busy for seconds, beyond the 5 s one try waits
// (the noop run's revocable subtree was left behind so).
func removeRoot(l cgroups.Layout, root string) {
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
		cgrouptest.RemoveRoot(root)
		left := false
		for _, rel := range []string{root, cgroups.Subtree(root, cgroups.Revocable)} {
			for _, d := range l.PathsOf(rel).Dirs() {
				if _, err := os.Stat(d); err == nil {
					left = true
				}
			}
		}
		if !left {
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "colocation: cgroups of %s left behind\n", root)
			return
		}
	}
}

func removeCgroup(l cgroups.Layout, rel string) {
	dirs := l.PathsOf(rel).Dirs()
	deadline := time.Now().Add(5 * time.Second)
	for _, dir := range dirs {
		for syscall.Rmdir(dir) == syscall.EBUSY && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// cgroupCPU returns the CPU-seconds used by a cgroup and its descendants,
// from cpu.stat in the v2 tree (present on hybrid hosts too).
func cgroupCPU(l cgroups.Layout, rel string) float64 {
	v, _ := statField(filepath.Join(l.Unified, rel, "cpu.stat"), "usage_usec")
	return float64(v) / 1e6
}

type throttleStat struct {
	periods, throttled uint64
	time               time.Duration
}

// throttling reads CFS bandwidth statistics: v1 cpu.stat (throttled_time in
// ns) or v2 cpu.stat (throttled_usec).
func throttling(l cgroups.Layout, rel string) throttleStat {
	var t throttleStat
	file := filepath.Join(l.Unified, rel, "cpu.stat")
	if l.Mode == cgroups.ModeHybrid {
		file = filepath.Join(l.CPU, rel, "cpu.stat")
	}
	t.periods, _ = statField(file, "nr_periods")
	t.throttled, _ = statField(file, "nr_throttled")
	if ns, ok := statField(file, "throttled_time"); ok {
		t.time = time.Duration(ns)
	} else if us, ok := statField(file, "throttled_usec"); ok {
		t.time = time.Duration(us) * time.Microsecond
	}
	return t
}

func statField(file, key string) (uint64, bool) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// sampleTimeline samples the revocable subtree's CPU limit and CPU count
// every second until the returned function is called.
func sampleTimeline(l cgroups.Layout, rel, dev string) func() []point {
	var (
		mu     sync.Mutex
		points []point
	)
	stop := make(chan struct{})
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				limit, _ := l.CPULimit(rel)
				var ioLimit uint64
				if dev != "" {
					ioLimit, _ = l.IOLimit(rel, dev)
				}
				mu.Lock()
				points = append(points, point{At: time.Since(start).Round(time.Second), Limit: limit, IOLimit: ioLimit, CPUs: revocableCPUs(l, rel)})
				mu.Unlock()
			case <-stop:
				return
			}
		}
	}()
	return func() []point {
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return points
	}
}

// revocableCPUs counts the CPUs the revocable subtree may run on.
func revocableCPUs(l cgroups.Layout, rel string) int {
	for _, file := range []string{
		filepath.Join(l.Mountpoint, "cpuset", rel, "cpuset.effective_cpus"),
		filepath.Join(l.Unified, rel, "cpuset.cpus.effective"),
	} {
		if raw, err := os.ReadFile(file); err == nil {
			if cpus, err := cgroups.ParseCPUList(strings.TrimSpace(string(raw))); err == nil {
				return len(cpus)
			}
		}
	}
	return runtime.NumCPU()
}

// procStat is the first line of /proc/stat, in ticks.
type procStat []float64

const (
	statIdle    = 3
	statIOWait  = 4
	statIRQ     = 5
	statSoftIRQ = 6
	statSteal   = 7
)

func readProcStat() procStat {
	raw, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(raw), "\n")
	var out procStat
	for _, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		out = append(out, v)
	}
	return out
}

func (s procStat) busyFraction(before procStat) float64 {
	var total, idle float64
	for i := range s {
		if i >= 8 { // guest time is already in user
			break
		}
		d := s[i] - before[i]
		total += d
		if i == statIdle || i == statIOWait {
			idle += d
		}
	}
	if total <= 0 {
		return 0
	}
	return (total - idle) / total
}

// cores converts one column's ticks over wall seconds into cores (USER_HZ 100).
func (s procStat) cores(before procStat, column int, wall float64) float64 {
	if column >= len(s) || wall <= 0 {
		return 0
	}
	return (s[column] - before[column]) / 100 / wall
}

// describeMachine names what the results depend on: CPUs, SMT, cgroup
// layout, kernel.
func describeMachine() string {
	var b strings.Builder
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	fmt.Fprintf(&b, "machine: %d CPUs, kernel %s", runtime.NumCPU(), strings.TrimSpace(string(kernel)))
	if l, err := cgroups.Detect(cgrouptest.Mountpoint); err == nil {
		fmt.Fprintf(&b, ", cgroups %s", l.Mode)
	}
	if siblings, err := os.ReadFile("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list"); err == nil {
		cpus, _ := cgroups.ParseCPUList(strings.TrimSpace(string(siblings)))
		fmt.Fprintf(&b, ", %d hardware thread(s) per core", max(1, len(cpus)))
	}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil && strings.Contains(string(raw), " hypervisor") {
		b.WriteString(", virtual machine")
	}
	return b.String()
}

// everyTick calls fn with each tick's time, every interval, until stop or
// done is closed.
func everyTick(interval time.Duration, stop, done <-chan struct{}, fn func(now time.Time)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-done:
			return
		case now := <-tick.C:
			fn(now)
		}
	}
}
