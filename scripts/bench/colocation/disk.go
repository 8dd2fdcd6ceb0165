package main

// The io scenario's disk (--disk loop, the default): a loop device, with
// an ext4 file system on it that holds the run's sandboxes, over a file
// on a FUSE file system that the benchmark serves itself ("colocation
// disk"), which stores the bytes on a tmpfs of the benchmark's own and
// answers each request when a modelled device would: one command at a
// time in arrival order (FIFO), each holding the device for --disk-op
// plus its bytes at --disk-rate, a flush for --disk-flush after those
// ahead of it. The kernel's block layer is the real one: the loop
// device's request queue and I/O scheduler, blk-throttle (the agent's
// cap on the revocable subtree), the block tracepoints the agent's eBPF
// reads and ext4's journal all act on it as on any disk; only the
// device's service time is the model's. It models a disk of a known,
// steady bandwidth with a single queue whose cache flush costs
// --disk-flush (0: a drive with power-loss protection, or a cloud
// volume): not a host's virtual disk, whose flush took 25 ms on average
// (p99 75 ms) here and whose rate changes with other tenants. Loop
// submits to the file one request per submitting cgroup at a time
// (per-cgroup workers), so writers and the server's fsyncs meet in the
// model's queue as they would in a disk's. The server's threads run at
// real-time priority (--disk-rt-priority), as a disk's firmware does not
// wait for the host's CPUs, and it counts the commands it answered late
// (lateReplies). --disk host measures on the host's disk instead (the
// run's directory under /tmp).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
)

// diskModel is the modelled device's queue: commands are served one at a
// time in arrival order, each holding the device for op plus its bytes
// at rate; a flush holds it for flush. It is pure: the FUSE server asks
// it when a request completes and answers then.
type diskModel struct {
	rate  float64       // bytes per second
	op    time.Duration // per command, whatever its size
	flush time.Duration
	// freeAt is when the device finishes the last command admitted.
	freeAt time.Time
}

// transfer admits a read or write of n bytes arriving at now and returns
// when it completes.
func (d *diskModel) transfer(now time.Time, n int) time.Time {
	return d.admit(now, d.op+time.Duration(float64(n)/d.rate*float64(time.Second)))
}

// sync admits a cache flush arriving at now and returns when it completes:
// after every command ahead of it, then flush.
func (d *diskModel) sync(now time.Time) time.Time { return d.admit(now, d.flush) }

func (d *diskModel) admit(now time.Time, hold time.Duration) time.Time {
	start := now
	if d.freeAt.After(now) {
		start = d.freeAt
	}
	d.freeAt = start.Add(hold)
	return d.freeAt
}

// diskOptions are the modelled disk's flags.
type diskOptions struct {
	kind  string // "loop" or "host"
	rate  float64
	op    time.Duration
	flush time.Duration
	size  int64 // bytes
	// requestKiB is the loop device's largest request at the start of a
	// run (queue/max_sectors_kb): a loop device keeps one set before,
	// so each run sets it.
	requestKiB uint64
	// rtPriority is the disk server's real-time priority (SCHED_FIFO; 0:
	// none, the CPU weight of its cgroup only). A disk is hardware: its
	// latency does not depend on who else wants the host's CPUs, but the
	// model's answers come from a user-space process that does.
	rtPriority int
	// scheduler is the whole disk's I/O scheduler ("": the kernel's
	// default for a loop device, none).
	scheduler string
	// iosched are the scheduler's tunables (queue/iosched/KEY), as
	// KEY=VALUE.
	iosched []string
	// layout is "split" (the one modelled disk in two halves, each a
	// loop device with an ext4 file system: the run's directory and
	// guaranteed sandboxes on the first, revocable sandboxes on the
	// second, given to the agent as --revocable-sandbox-dir) or "shared"
	// (one file system, one journal, for both).
	layout string
}

// Layouts of the modelled disk (diskOptions.layout).
const (
	layoutSplit  = "split"
	layoutShared = "shared"
)

func (o diskOptions) String() string {
	if o.kind == "host" {
		return "host disk"
	}
	prio := "served at normal CPU priority"
	if o.rtPriority > 0 {
		prio = fmt.Sprintf("served at real-time priority %d", o.rtPriority)
	}
	fsys := "one ext4 file system for guaranteed and revocable sandboxes (one journal)"
	if o.layout == layoutSplit {
		fsys = "split in two halves (a loop device over the whole disk's and an ext4 file system each, as partitions: their requests meet in the whole disk's queue and scheduler): guaranteed sandboxes on one, revocable on the other (--revocable-sandbox-dir)"
	}
	sched := o.scheduler
	if sched == "" {
		sched = "the kernel's default"
	}
	return fmt.Sprintf("loop device over the benchmark's modelled disk: %.0f MiB/s, %v per command, flush %v, FIFO, requests <= %d KiB at start, %s, I/O scheduler %s%s; %s", o.rate/(1<<20), o.op, o.flush, o.requestKiB, prio, sched, tunables(o.iosched), fsys)
}

func tunables(kvs []string) string {
	if len(kvs) == 0 {
		return ""
	}
	return " (" + strings.Join(kvs, ", ") + ")"
}

func (o diskOptions) validate() error {
	switch o.kind {
	case "host":
		return nil
	case "loop":
	default:
		return fmt.Errorf("--disk %q: want loop or host", o.kind)
	}
	var errs []error
	if !(o.rate > 0) {
		errs = append(errs, fmt.Errorf("--disk-rate must be positive, got %v", o.rate/(1<<20)))
	}
	if o.op < 0 {
		errs = append(errs, fmt.Errorf("--disk-op must not be negative, got %v", o.op))
	}
	if o.flush < 0 {
		errs = append(errs, fmt.Errorf("--disk-flush must not be negative, got %v", o.flush))
	}
	if o.rtPriority < 0 || o.rtPriority > 99 {
		errs = append(errs, fmt.Errorf("--disk-rt-priority must be in [0, 99], got %d", o.rtPriority))
	}
	if o.requestKiB < 4 {
		errs = append(errs, fmt.Errorf("--disk-request-kib must be at least 4 (a page), got %d", o.requestKiB))
	}
	if o.layout != layoutSplit && o.layout != layoutShared {
		errs = append(errs, fmt.Errorf("--io-layout %q: want %s or %s", o.layout, layoutSplit, layoutShared))
	}
	switch o.scheduler {
	case "", "none", "mq-deadline", "kyber", "bfq":
	default:
		errs = append(errs, fmt.Errorf("--disk-scheduler %q: want none, mq-deadline, kyber or bfq", o.scheduler))
	}
	for _, kv := range o.iosched {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.Contains(k, "/") {
			errs = append(errs, fmt.Errorf("--disk-iosched %q: want KEY=VALUE, a file of the scheduler's queue/iosched", kv))
		}
	}
	if len(o.iosched) > 0 && (o.scheduler == "" || o.scheduler == "none") {
		errs = append(errs, errors.New("--disk-iosched needs --disk-scheduler (none has no tunables)"))
	}
	if o.size < 1<<30 {
		errs = append(errs, fmt.Errorf("--disk-mib must be at least 1024 (the writers' files and the probe's), got %d", o.size>>20))
	}
	return errors.Join(errs...)
}

// lateReplies records the model's own lateness: how long after the
// model's completion time each command was answered (the server's thread
// woken from its sleep, or its reply sent, late). A real disk answers on
// time whatever the host's CPUs do; a command answered more than
// lateThreshold late is the benchmark measuring its own server, not the
// disk. The first lateLogLimit of them are logged with their time, the
// rest only counted. It is pure: the server passes the times.
type lateReplies struct {
	Commands, Late uint64        // commands answered, of them late
	Worst          time.Duration // the largest lateness seen
	logged         int
}

// lateThreshold is the lateness from which a reply counts as late: the
// host's timer slack and a wake-up on an idle CPU stay well under it.
const lateThreshold = 2 * time.Millisecond

// lateLogLimit bounds the late replies logged one by one.
const lateLogLimit = 50

// note records a command due at due and answered at answered; it returns
// the line to log, or "" (on time, or past lateLogLimit: the first one
// past it says that the rest are only counted).
func (r *lateReplies) note(due, answered time.Time) string {
	r.Commands++
	late := answered.Sub(due)
	r.Worst = max(r.Worst, late)
	if late < lateThreshold {
		return ""
	}
	r.Late++
	switch {
	case r.logged < lateLogLimit:
		r.logged++
		return fmt.Sprintf("colocation disk: command due at %s answered %v late", due.Format("15:04:05.000000"), late.Round(10*time.Microsecond))
	case r.logged == lateLogLimit:
		r.logged++
		return fmt.Sprintf("colocation disk: more than %d late replies: the rest are only counted", lateLogLimit)
	}
	return ""
}

// String summarises the record.
func (r *lateReplies) String() string {
	return fmt.Sprintf("colocation disk: %d commands, %d answered %v or more after the model's time, worst %v", r.Commands, r.Late, lateThreshold, r.Worst.Round(10*time.Microsecond))
}

// modelFile is the FUSE file that is the disk's contents: reads and
// writes go to the store (a file on tmpfs) and are answered when the
// model says.
type modelFile struct {
	fs.Inode
	store *os.File
	size  int64
	mu    sync.Mutex
	model *diskModel
	late  lateReplies // under mu
}

var (
	_ fs.NodeOpener    = (*modelFile)(nil)
	_ fs.NodeReader    = (*modelFile)(nil)
	_ fs.NodeWriter    = (*modelFile)(nil)
	_ fs.NodeFsyncer   = (*modelFile)(nil)
	_ fs.NodeGetattrer = (*modelFile)(nil)
	_ fs.NodeSetattrer = (*modelFile)(nil)
	_ fs.NodeFlusher   = (*modelFile)(nil)
)

// wait answers at the model's completion time for a command arriving now.
func (f *modelFile) wait(admit func(*diskModel, time.Time) time.Time) {
	f.mu.Lock()
	done := admit(f.model, time.Now())
	f.mu.Unlock()
	sleepPrecise(time.Until(done))
	answered := time.Now()
	f.mu.Lock()
	line := f.late.note(done, answered)
	f.mu.Unlock()
	if line != "" {
		fmt.Fprintln(os.Stderr, line)
	}
}

// sleepPrecise sleeps d in the kernel (nanosleep, an hrtimer): the Go
// runtime's timers wake sub-millisecond sleeps a millisecond late on a
// busy host, which would add a millisecond to every command.
func sleepPrecise(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}

func (f *modelFile) Open(context.Context, uint32) (fs.FileHandle, uint32, syscall.Errno) {
	// Direct I/O: no FUSE page cache between the loop device and the
	// model; parallel: a write does not wait for the file lock behind
	// another (a writer's 1 MiB), as commands do not on a disk.
	return nil, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES, 0
}

func (f *modelFile) Read(_ context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := f.store.ReadAt(dest, off)
	if err != nil && n == 0 && off < f.size {
		return nil, fs.ToErrno(err)
	}
	f.wait(func(d *diskModel, now time.Time) time.Time { return d.transfer(now, n) })
	return fuse.ReadResultData(dest[:n]), 0
}

func (f *modelFile) Write(_ context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if off+int64(len(data)) > f.size {
		return 0, syscall.ENOSPC
	}
	if _, err := f.store.WriteAt(data, off); err != nil {
		return 0, fs.ToErrno(err)
	}
	f.wait(func(d *diskModel, now time.Time) time.Time { return d.transfer(now, len(data)) })
	return uint32(len(data)), 0
}

func (f *modelFile) Fsync(context.Context, fs.FileHandle, uint32) syscall.Errno {
	f.wait((*diskModel).sync)
	return 0
}

func (f *modelFile) Flush(context.Context, fs.FileHandle) syscall.Errno { return 0 }

func (f *modelFile) Getattr(_ context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFREG | 0o600
	out.Size = uint64(f.size)
	out.Blocks = uint64(f.size) / 512
	return 0
}

func (f *modelFile) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && int64(sz) != f.size {
		return syscall.EPERM // the disk's size is fixed
	}
	return f.Getattr(ctx, fh, out)
}

// runDiskServer is the "disk" sub-command: it serves the modelled disk as
// the file "disk" of a FUSE file system mounted at --mount, its bytes in
// --store, until SIGTERM or SIGINT (then it unmounts). It prints "ready"
// once mounted.
func runDiskServer(args []string) error {
	fset := flag.NewFlagSet("disk", flag.ContinueOnError)
	store := fset.String("store", "", "file holding the disk's bytes (on a tmpfs)")
	mount := fset.String("mount", "", "directory to mount the FUSE file system on")
	rate := fset.Float64("rate", 128, "MiB/s")
	op := fset.Duration("op", 20*time.Microsecond, "time each command holds the device, whatever its size")
	flushCost := fset.Duration("flush", 0, "time a cache flush holds the device")
	mib := fset.Int64("mib", 2048, "size, MiB")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if *store == "" || *mount == "" {
		return errors.New("disk: --store and --mount are needed")
	}
	f, err := os.OpenFile(*store, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	size := *mib << 20
	if err := f.Truncate(size); err != nil {
		return err
	}
	file := &modelFile{store: f, size: size, model: &diskModel{rate: *rate * (1 << 20), op: *op, flush: *flushCost}}
	root := &fs.Inode{}
	server, err := fs.Mount(*mount, root, &fs.Options{
		MountOptions: fuse.MountOptions{DirectMount: true, DirectMountStrict: true, FsName: "slackline-modelled-disk", Name: "slackline"},
		OnAdd: func(ctx context.Context) {
			root.AddChild("disk", root.NewPersistentInode(ctx, file, fs.StableAttr{Mode: syscall.S_IFREG, Ino: 2}), true)
		},
	})
	if err != nil {
		return fmt.Errorf("mount the modelled disk on %s: %w", *mount, err)
	}
	fmt.Println("ready")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		// The loop device is detached first (the benchmark's teardown);
		// a lazy unmount if something still holds it.
		if err := server.Unmount(); err != nil {
			_ = syscall.Unmount(*mount, syscall.MNT_DETACH)
		}
	}()
	server.Wait()
	file.mu.Lock()
	fmt.Fprintln(os.Stderr, file.late.String())
	file.mu.Unlock()
	return nil
}

// modelledDisk is one run's disk: the tmpfs store, the disk server, the
// loop device and the ext4 file system mounted at Dir (and, split, the
// second one at RevocableDir).
type modelledDisk struct {
	base   string // the directory holding store, fuse and fs
	server *exec.Cmd
	// whole is the loop device over the whole disk (/dev/loopN), loops
	// the ones holding the file systems: whole, or (split) the loop
	// devices over its first half, then its second.
	whole string
	loops []string
	// Dir is where the run's files go (the ext4 file system).
	Dir string
	// RevocableDir, with the split layout, is the directory for revocable
	// sandboxes, on the second half's file system ("": shared).
	RevocableDir string
	// Devices are the file systems' loop devices ("MAJ:MIN"), Scheduler
	// the whole disk's I/O scheduler.
	Devices   []string
	Scheduler string
}

// setupDisk builds a modelled disk under base (an empty directory), each
// step a step of cs that pushes its undoing on cs as it completes (so
// that a signal's unwinding undoes it too); if a step fails, setupDisk
// unwinds cs to where it began. join, when set, is called with the disk
// server's pid (to move it into a cgroup).
func setupDisk(o diskOptions, self, base string, cs *cleanupStack, join func(pid int) error) (d *modelledDisk, err error) {
	mark := cs.mark()
	defer func() {
		if err != nil {
			cs.unwind(mark)
			d = nil
		}
	}()
	undo := func(f func() error) {
		cs.push(func() {
			if err := f(); err != nil {
				fmt.Fprintln(os.Stderr, "colocation: modelled disk:", err)
			}
		})
	}
	d = &modelledDisk{base: base}
	store, fuseDir, fsDir, revDir := filepath.Join(base, "store"), filepath.Join(base, "fuse"), filepath.Join(base, "fs"), filepath.Join(base, "fs-revocable")
	diskFile := filepath.Join(fuseDir, "disk")
	split := o.layout == layoutSplit
	steps := []struct {
		name string
		do   func() error
	}{
		{"directories", func() error {
			undo(func() error { return removeAll(base) })
			for _, dir := range []string{store, fuseDir, fsDir, revDir} {
				if err := os.Mkdir(dir, 0o700); err != nil {
					return err
				}
			}
			return nil
		}},
		{"store", func() error {
			if err := syscall.Mount("tmpfs", store, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%dk,mode=0700", (o.size>>10)+1024)); err != nil {
				return fmt.Errorf("mount the disk's tmpfs store: %w", err)
			}
			undo(func() error { return unmount(store) })
			return nil
		}},
		{"server", func() error {
			srv := exec.Command(self, "disk", "--store", filepath.Join(store, "disk.img"), "--mount", fuseDir,
				"--rate", fmt.Sprint(o.rate/(1<<20)), "--op", o.op.String(), "--flush", o.flush.String(), "--mib", fmt.Sprint(o.size>>20))
			// A process group of its own: a terminal's Ctrl-C goes to
			// the benchmark's group, and the server must stop only on
			// the benchmark's SIGTERM, once the loop device over its
			// disk is gone (Pdeathsig if the benchmark dies).
			srv.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
			srv.Stderr = os.Stderr
			out, err := srv.StdoutPipe()
			if err != nil {
				return err
			}
			if err := srv.Start(); err != nil {
				return err
			}
			d.server = srv
			undo(func() error { return stopServer(srv, fuseDir) })
			line := make([]byte, 6)
			if _, err := io.ReadFull(out, line); err != nil || string(line) != "ready\n" {
				return fmt.Errorf("the disk server did not start (%q, %v)", line, err)
			}
			if join != nil {
				return join(srv.Process.Pid)
			}
			return nil
		}},
		{"losetup", func() error {
			// Pushed first: losetup may attach a device and be killed
			// (the terminal's SIGINT) before it names it.
			undo(func() error { return detachLoops(diskFile) })
			whole, err := attachLoop(diskFile, o.requestKiB)
			if err != nil {
				return err
			}
			d.whole = whole
			if o.scheduler != "" {
				old, err := setScheduler(whole, o.scheduler)
				if err != nil {
					return err
				}
				// A loop device keeps its scheduler when detached.
				undo(func() error { _, err := setScheduler(whole, old); return err })
			}
			for _, kv := range o.iosched {
				k, v, _ := strings.Cut(kv, "=")
				file := filepath.Join("/sys/block", filepath.Base(whole), "queue", "iosched", k)
				if err := os.WriteFile(file, []byte(v), 0); err != nil {
					return fmt.Errorf("--disk-iosched %s on %s: %w", kv, whole, err)
				}
			}
			if !split {
				d.loops = []string{whole}
				return nil
			}
			// Split: two loop devices over the two halves of the whole
			// disk's loop device, as partitions over a disk (this
			// kernel, like many guests', parses no partition tables: a
			// loop device's partitions never appear, and it has no
			// device-mapper). Their requests pass through the whole
			// disk's queue and I/O scheduler, as a partition's do, with
			// the cgroup that issued them (direct I/O from the halves'
			// per-cgroup workers).
			undo(func() error { return detachLoops(whole) })
			for _, r := range [][2]int64{{0, o.size / 2}, {o.size / 2, o.size - o.size/2}} {
				half, err := attachLoop(whole, o.requestKiB, "--direct-io=on", "--offset", fmt.Sprint(r[0]), "--sizelimit", fmt.Sprint(r[1]))
				if err != nil {
					return err
				}
				d.loops = append(d.loops, half)
			}
			return nil
		}},
		{"mkfs", func() error {
			for _, dev := range d.loops {
				if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", dev).CombinedOutput(); err != nil {
					return fmt.Errorf("mkfs.ext4 %s: %v: %s", dev, err, out)
				}
			}
			return nil
		}},
		{"mount", func() error {
			for i, dev := range d.loops {
				dir := []string{fsDir, revDir}[i]
				if err := syscall.Mount(dev, dir, "ext4", 0, ""); err != nil {
					return fmt.Errorf("mount %s: %w", dev, err)
				}
				undo(func() error { return unmount(dir) })
				if err := os.Chmod(dir, 0o755); err != nil {
					return err
				}
			}
			if split {
				// The agent's revocable sandboxes: a directory of the
				// second file system, which the agent expects to exist.
				d.RevocableDir = filepath.Join(revDir, "sandboxes")
				return os.Mkdir(d.RevocableDir, 0o755)
			}
			return nil
		}},
	}
	for _, s := range steps {
		if err := cs.step(s.name, s.do); err != nil {
			return d, err
		}
	}
	d.Dir = fsDir
	for _, loop := range d.loops {
		var st syscall.Stat_t
		if err := syscall.Stat(loop, &st); err != nil {
			return d, err
		}
		d.Devices = append(d.Devices, fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
	}
	d.Scheduler = activeScheduler(d.whole)
	return d, nil
}

// attachLoop attaches a loop device over file (losetup's extra args
// first) and sets its largest request to requestKiB: a loop device keeps
// the request size set before (by an agent's diskio controller, or by
// hand), so each run starts from the one asked for.
func attachLoop(file string, requestKiB uint64, args ...string) (string, error) {
	out, err := exec.Command("losetup", append(append([]string{"--find", "--show"}, args...), file)...).Output()
	if err != nil {
		return "", fmt.Errorf("losetup %s: %w", file, exitText(err))
	}
	dev := strings.TrimSpace(string(out))
	msk := filepath.Join("/sys/block", filepath.Base(dev), "queue", "max_sectors_kb")
	if err := os.WriteFile(msk, []byte(fmt.Sprint(requestKiB)), 0); err != nil {
		return dev, fmt.Errorf("set %s to %d: %w", msk, requestKiB, err)
	}
	return dev, nil
}

// setScheduler makes sched the I/O scheduler of the block device dev
// (/dev/NAME) and returns the one it replaced.
func setScheduler(dev, sched string) (string, error) {
	file := schedulerFile(dev)
	old := activeScheduler(dev)
	if old == "unknown" {
		return "", fmt.Errorf("--disk-scheduler %s: %s unreadable", sched, file)
	}
	if err := os.WriteFile(file, []byte(sched), 0); err != nil {
		return old, fmt.Errorf("--disk-scheduler %s on %s (its scheduler %s): %w", sched, dev, old, err)
	}
	return old, nil
}

// stopServer stops the disk server (SIGTERM, then SIGKILL after 10 s) and
// unmounts its FUSE file system at fuseDir if it is still mounted.
func stopServer(srv *exec.Cmd, fuseDir string) error {
	_ = srv.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = srv.Process.Kill()
		<-done
	}
	if mounted(fuseDir) {
		return unmount(fuseDir)
	}
	return nil
}

// detachLoops detaches every loop device whose backing file is file.
func detachLoops(file string) error {
	backing, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return err
	}
	var errs []error
	for _, b := range backing {
		name, err := os.ReadFile(b)
		if err != nil || strings.TrimSpace(string(name)) != file {
			continue
		}
		loop := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(b)))
		if out, err := exec.Command("losetup", "--detach", loop).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("losetup --detach %s: %v: %s", loop, err, out))
		}
	}
	return errors.Join(errs...)
}

// startDisk sets up a run's modelled disk (--disk loop) under the
// benchmark's directory, its server in the cgroup cg (made here, with the
// load generator's CPU weight: the server's answers are the disk's
// latency, and other tenants must not delay them), each step's undoing
// pushed on the cleanup stack as the step completes.
func startDisk(o options, l cgroups.Layout, cg string) (*modelledDisk, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var base string
	if err := cleanup.step("base", func() error {
		if base, err = os.MkdirTemp(o.binDir, "disk-"); err != nil {
			return err
		}
		cleanup.push(func() { _ = removeAll(base) })
		return nil
	}); err != nil {
		return nil, err
	}
	if err := cleanup.step("cgroup", func() error {
		// Pushed first: a v1 hierarchy's directory may be made and the
		// next not.
		cleanup.push(func() { removeCgroup(l, cg) })
		return makeCgroup(l, cg)
	}); err != nil {
		return nil, err
	}
	if err := setWeight(l, cg, o.rootWeight); err != nil {
		return nil, err
	}
	d, err := setupDisk(o.disk, self, base, &cleanup, func(pid int) error {
		if err := joinCgroup(l, cg, pid); err != nil {
			return err
		}
		if o.disk.rtPriority == 0 {
			return nil
		}
		return makeRealtime(l, cg, pid, o.disk.rtPriority)
	})
	if err != nil {
		return nil, fmt.Errorf("modelled disk: %w", err)
	}
	if l.Mode != cgroups.ModeV2 && l.Blkio != "" {
		// Since Linux 6.10 blk-throttle starts on a device only once a
		// limit is configured on it, and until then v1's
		// blkio.throttle.io_service_bytes counts nothing on it: neither
		// the benchmark nor the agent would see the writers' bytes on a
		// fresh loop device. Configuring "no limit" in a cgroup of the
		// benchmark's own starts it (v2's io.stat counts regardless).
		dir := filepath.Join(l.Blkio, cg)
		if err := cleanup.step("blkio", func() error {
			if err := os.Mkdir(dir, 0o755); err != nil {
				return err
			}
			cleanup.push(func() { removeCgroupDir(dir) })
			return nil
		}); err != nil {
			return nil, err
		}
		for _, dev := range d.Devices {
			if err := os.WriteFile(filepath.Join(dir, "blkio.throttle.write_bps_device"), []byte(dev+" 0"), 0); err != nil {
				return nil, fmt.Errorf("start blk-throttle on %s: %w", dev, err)
			}
		}
	}
	return d, nil
}

// rtRuntime is the real-time CPU time per second the disk server's cgroup
// may use where the kernel groups real-time tasks (v1
// cpu.rt_runtime_us): the model needs a fraction of a core (copies to
// tmpfs, FUSE round trips), and the rest of the host's real-time budget
// (0.95 s per second by default) stays with its root.
const rtRuntime = 400 * time.Millisecond

// makeRealtime runs every thread of the disk server pid at SCHED_FIFO
// priority prio, its cgroup cg (on a v1 cpu hierarchy) given rtRuntime
// of real-time time per second first. Threads the Go runtime starts later
// inherit the policy from the thread that starts them; the threads are
// listed twice to catch one started meanwhile.
func makeRealtime(l cgroups.Layout, cg string, pid, prio int) error {
	if l.Mode != cgroups.ModeV2 && l.CPU != "" {
		file := filepath.Join(l.CPU, cg, "cpu.rt_runtime_us")
		if _, err := os.Stat(file); err == nil {
			if err := os.WriteFile(file, []byte(fmt.Sprint(rtRuntime.Microseconds())), 0); err != nil {
				return fmt.Errorf("real-time budget of the disk server's cgroup: %w", err)
			}
		}
	}
	for range 2 {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			attr := unix.SchedAttr{Policy: unix.SCHED_FIFO, Priority: uint32(prio)}
			if err := unix.SchedSetAttr(tid, &attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("disk server thread %d at SCHED_FIFO %d: %w", tid, prio, err)
			}
		}
	}
	return nil
}

// removeCgroupDir removes an empty cgroup directory, trying again for up
// to 5 s while it is busy.
func removeCgroupDir(dir string) {
	for deadline := time.Now().Add(5 * time.Second); syscall.Rmdir(dir) == syscall.EBUSY && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

// unmount unmounts dir, trying again for up to 30 s while it is busy (a
// killed task's last writes), then lazily.
func unmount(dir string) error {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err := syscall.Unmount(dir, 0)
		if err == nil || errors.Is(err, syscall.EINVAL) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			if out, ferr := exec.Command("fuser", "-vm", dir).CombinedOutput(); ferr == nil {
				err = fmt.Errorf("%w (fuser -vm: %s)", err, strings.TrimSpace(string(out)))
			}
			if lerr := syscall.Unmount(dir, syscall.MNT_DETACH); lerr == nil {
				return fmt.Errorf("unmount %s: %w (detached lazily)", dir, err)
			}
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
}

// mounted says whether dir is a mount point (its device differs from its
// parent's).
func mounted(dir string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat(dir, &a) != nil || syscall.Stat(filepath.Dir(dir), &b) != nil {
		return true // a dead FUSE mount fails stat: unmount it
	}
	return a.Dev != b.Dev
}

// removeAll removes dir, refusing to cross into a mount left behind.
func removeAll(dir string) error {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if p := filepath.Join(dir, e.Name()); e.IsDir() && mounted(p) {
			return fmt.Errorf("%s still mounted: not removed", p)
		}
	}
	return os.RemoveAll(dir)
}

func schedulerFile(dev string) string {
	return filepath.Join("/sys/block", filepath.Base(dev), "queue", "scheduler")
}

// activeScheduler returns the I/O scheduler of the block device dev
// (/dev/NAME): the bracketed one, "unknown" if unreadable.
func activeScheduler(dev string) string {
	data, err := os.ReadFile(schedulerFile(dev))
	if err != nil {
		return "unknown"
	}
	for f := range strings.FieldsSeq(string(data)) {
		if strings.HasPrefix(f, "[") {
			return strings.Trim(f, "[]")
		}
	}
	return "none"
}

func exitText(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
	}
	return err
}
