package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/estimator/backtest"
	"github.com/slackline/slackline/resources"
)

// recordOptions are the flags of "record".
type recordOptions struct {
	name       string
	command    string
	duration   time.Duration
	interval   time.Duration
	allocation string
	out        string
	cgroupRoot string
}

func newRecordCommand() *cobra.Command {
	o := recordOptions{}
	cmd := &cobra.Command{
		Use:   "record",
		Short: "Run a workload in a fresh cgroup and record its CPU and memory usage as a trace",
		Long: `record runs --command under /bin/sh in a cgroup of its own
(slackline-trace-<random>: cpuacct and memory on cgroup v1 or hybrid hosts,
the unified tree on pure cgroup v2), samples its usage every --interval for
--duration, writes the trace and removes the cgroup, killing whatever is left
in it. It needs root. Only the cgroup it created is touched.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			alloc, err := resources.Parse(o.allocation)
			if err != nil {
				return fmt.Errorf("--allocation: %w", err)
			}
			if o.command == "" || o.name == "" {
				return errors.New("--name and --command are required")
			}
			if o.interval <= 0 || o.duration < o.interval {
				return errors.New("--interval must be positive and at most --duration")
			}
			trace, err := record(cmd.Context(), o, alloc)
			if err != nil {
				return err
			}
			out := o.out
			if out == "" {
				out = o.name + ".csv"
			}
			f, err := os.Create(out)
			if err != nil {
				return fmt.Errorf("create trace file: %w", err)
			}
			if err := backtest.WriteTrace(f, trace); err != nil {
				f.Close()
				return fmt.Errorf("write trace: %w", err)
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("write trace: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "recorded %d points over %v into %s\n", len(trace.Points), trace.Duration(), out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.name, "name", "", "trace name (steady, bursty, ...)")
	f.StringVar(&o.command, "command", "", "workload, run with /bin/sh -c")
	f.DurationVar(&o.duration, "duration", 60*time.Second, "how long to record")
	f.DurationVar(&o.interval, "interval", 100*time.Millisecond, "sampling interval")
	f.StringVar(&o.allocation, "allocation", "cpus:2;mem:512", "allocation the container is given when the trace is replayed")
	f.StringVar(&o.out, "out", "", "trace file (default <name>.csv)")
	f.StringVar(&o.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "cgroup filesystem root")
	return cmd
}

// usageCgroup is the recorder's own cgroup: where the workload's processes
// are put and how its usage is read.
type usageCgroup struct {
	// dirs are the directories created, one per hierarchy.
	dirs []string
	// cpuUsage returns the cumulative CPU time used.
	cpuUsage func() (time.Duration, error)
	// memBytes returns the memory working set: anonymous plus active file
	// pages (what the workload cannot lose without slowing down; inactive
	// page cache is reclaimable and not counted).
	memBytes func() (uint64, error)
}

// newUsageCgroup creates slackline-trace-<random> in the cpuacct and memory
// hierarchies (cgroup v1, hybrid) or in the unified tree (cgroup v2).
func newUsageCgroup(root string) (*usageCgroup, error) {
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, fmt.Errorf("random cgroup name: %w", err)
	}
	name := "slackline-trace-" + hex.EncodeToString(suffix[:])
	cg := &usageCgroup{}
	mk := func(dir string) error {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup: %w", err)
		}
		cg.dirs = append(cg.dirs, dir)
		return nil
	}
	if _, err := os.Stat(filepath.Join(root, "cpuacct", "cpuacct.usage")); err == nil {
		cpuDir, memDir := filepath.Join(root, "cpuacct", name), filepath.Join(root, "memory", name)
		if err := mk(cpuDir); err != nil {
			return nil, err
		}
		if err := mk(memDir); err != nil {
			cg.remove()
			return nil, err
		}
		cg.cpuUsage = func() (time.Duration, error) {
			ns, err := readUint(filepath.Join(cpuDir, "cpuacct.usage"))
			return time.Duration(ns), err
		}
		cg.memBytes = func() (uint64, error) {
			return statSum(filepath.Join(memDir, "memory.stat"), "total_rss", "total_active_file")
		}
		return cg, nil
	}
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		dir := filepath.Join(root, name)
		if err := mk(dir); err != nil {
			return nil, err
		}
		cg.cpuUsage = func() (time.Duration, error) {
			us, err := statField(filepath.Join(dir, "cpu.stat"), "usage_usec")
			return time.Duration(us) * time.Microsecond, err
		}
		cg.memBytes = func() (uint64, error) {
			v, err := statSum(filepath.Join(dir, "memory.stat"), "anon", "active_file")
			if errors.Is(err, os.ErrNotExist) { // memory controller not enabled here
				return 0, nil
			}
			return v, err
		}
		return cg, nil
	}
	return nil, fmt.Errorf("no cpuacct hierarchy or cgroup v2 tree under %s", root)
}

// start runs command with every process of it inside the cgroup: the shell
// moves itself in before it execs the workload, so nothing runs outside.
func (cg *usageCgroup) start(command string) (*exec.Cmd, error) {
	var join strings.Builder
	for i := range cg.dirs {
		fmt.Fprintf(&join, `echo $$ > "$SLACKLINE_TRACE_CGROUP_%d/cgroup.procs" && `, i)
	}
	cmd := exec.Command("/bin/sh", "-c", join.String()+`exec /bin/sh -c "$SLACKLINE_TRACE_COMMAND"`)
	cmd.Env = append(os.Environ(), "SLACKLINE_TRACE_COMMAND="+command)
	for i, dir := range cg.dirs {
		cmd.Env = append(cmd.Env, fmt.Sprintf("SLACKLINE_TRACE_CGROUP_%d=%s", i, dir))
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start workload: %w", err)
	}
	return cmd, nil
}

// remove kills every process left in the cgroup and removes its
// directories. cgroup v1 has no cgroup.kill, so it kills by pid until the
// cgroup is empty.
func (cg *usageCgroup) remove() error {
	var errs []error
	for _, dir := range cg.dirs {
		for range 100 {
			data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
			if err != nil || len(strings.TrimSpace(string(data))) == 0 {
				break
			}
			for _, field := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(field); err == nil {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		var err error
		for range 50 { // rmdir fails with EBUSY until the killed tasks are gone
			if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}

// record runs the workload and samples it until the duration ends or ctx is
// cancelled; the cgroup is removed in every case.
func record(ctx context.Context, o recordOptions, alloc resources.Resources) (trace backtest.Trace, err error) {
	cg, err := newUsageCgroup(o.cgroupRoot)
	if err != nil {
		return backtest.Trace{}, err
	}
	defer func() {
		if rmErr := cg.remove(); rmErr != nil && err == nil {
			err = rmErr
		}
	}()
	trace = backtest.Trace{Name: o.name, Command: o.command, Interval: o.interval, Allocation: alloc}
	prevUsage, err := cg.cpuUsage()
	if err != nil {
		return backtest.Trace{}, fmt.Errorf("read cpu usage: %w", err)
	}
	cmd, err := cg.start(o.command)
	if err != nil {
		return backtest.Trace{}, err
	}
	waited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(waited) }()
	defer func() {
		_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		<-waited
	}()

	start := time.Now()
	prevTime, recorded := start, 0
	steps := int(o.duration / o.interval)
	ticker := time.NewTicker(o.interval)
	defer ticker.Stop()
	for recorded < steps {
		select {
		case <-ctx.Done():
			return backtest.Trace{}, ctx.Err()
		case <-ticker.C:
		}
		now := time.Now()
		usage, err := cg.cpuUsage()
		if err != nil {
			return backtest.Trace{}, fmt.Errorf("read cpu usage: %w", err)
		}
		mem, err := cg.memBytes()
		if err != nil {
			return backtest.Trace{}, fmt.Errorf("read memory usage: %w", err)
		}
		// A loaded machine can delay the recorder by whole intervals. The
		// trace keeps wall time: the intervals that passed get a point each,
		// all with the average over them.
		step := min(steps, int((now.Sub(start)+o.interval/2)/o.interval))
		if step <= recorded {
			continue
		}
		cores := max(0, float64(usage-prevUsage)/float64(now.Sub(prevTime)))
		for ; recorded < step; recorded++ {
			trace.Points = append(trace.Points, backtest.Point{
				Offset: time.Duration(recorded+1) * o.interval, CPU: cores, MemBytes: mem,
			})
		}
		prevUsage, prevTime = usage, now
	}
	return trace, nil
}

func readUint(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
}

// statField returns the value of key in a "key value" per line file.
func statField(path, key string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if ok && k == key {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", path, key)
}

// statSum returns the sum of the named fields of a flat-keyed stat file.
func statSum(path string, keys ...string) (uint64, error) {
	var sum uint64
	for _, key := range keys {
		v, err := statField(path, key)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}
