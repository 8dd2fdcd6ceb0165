package bpf

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// schedShared are the scheduler objects both variants of sched.c have and
// user space uses.
type schedShared struct {
	CPUStates  *ebpf.Map      `ebpf:"cpu_states"`
	Delays     *ebpf.Map      `ebpf:"delays"`
	Events     *ebpf.Map      `ebpf:"events"`
	EventsLost *ebpf.Variable `ebpf:"events_lost"`
	// CulpritStates: who delayed whom, every culprit.
	CulpritStates *ebpf.Map `ebpf:"culprit_states"`
}

// schedKernelWaits is the variant for kernels that keep sched_info: one
// program, which reads wait start times from the task.
type schedKernelWaits struct {
	schedShared
	Switch *ebpf.Program `ebpf:"sched_switch"`
}

// schedOwnWaits is the variant for kernels without sched_info: the wakeup
// tracepoints stamp waits in task storage.
type schedOwnWaits struct {
	schedShared
	Switch    *ebpf.Program `ebpf:"sched_switch_wakeups"`
	Wakeup    *ebpf.Program `ebpf:"sched_wakeup"`
	WakeupNew *ebpf.Program `ebpf:"sched_wakeup_new"`
}

// schedObjs are the loaded scheduler programs, of either variant, and the
// CPUs' states (sched.c's cpu_states) mapped into memory.
type schedObjs struct {
	schedShared
	// kernelWaits: the variant that reads sched_info.
	kernelWaits bool
	points      []attachPoint
	mem         []byte
	cpus        []schedCpuState // views mem
}

// loadScheduler loads the sched_info variant when the kernel keeps
// sched_info (probeSchedInfo) and it loads, else (or when wakeupHooks is
// set) the wakeup variant. The error is the wakeup variant's, classified by
// the caller.
func loadScheduler(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions, ncpu int, wakeupHooks bool, log *slog.Logger) (*schedObjs, error) {
	spec.Maps["cpu_states"].MaxEntries = uint32(ncpu)
	spec.Maps["culprit_states"].MaxEntries = uint32(ncpu)
	o := &schedObjs{}
	why := errors.New("asked for")
	if !wakeupHooks {
		why = probeSchedInfo()
	}
	if why == nil {
		var kw schedKernelWaits
		if why = spec.LoadAndAssign(&kw, opts); why == nil {
			log.Debug("eBPF run-queue waits from the kernel's sched_info")
			o.schedShared, o.kernelWaits = kw.schedShared, true
			o.points = []attachPoint{{"tp_btf/sched_switch", kw.Switch, tracing}}
		} else {
			why = fmt.Errorf("load sched_info variant: %w", classify(why))
		}
	}
	if why != nil {
		log.Info("eBPF run-queue waits from wakeup hooks (costlier)", "reason", why)
		var ow schedOwnWaits
		if err := spec.LoadAndAssign(&ow, opts); err != nil {
			return nil, err
		}
		o.schedShared = ow.schedShared
		o.points = []attachPoint{
			{"tp_btf/sched_wakeup", ow.Wakeup, tracing},
			{"tp_btf/sched_wakeup_new", ow.WakeupNew, tracing},
			{"tp_btf/sched_switch", ow.Switch, tracing},
		}
	}
	if err := o.mapCPUs(ncpu); err != nil {
		return nil, errors.Join(fmt.Errorf("map CPU states: %w", err), o.Close())
	}
	return o, nil
}

// mapCPUs maps cpu_states, where user space sets each CPU's gen and
// threshold and reads its resident counters.
func (o *schedObjs) mapCPUs(ncpu int) error {
	size := int(unsafe.Sizeof(schedCpuState{}))
	if vs := int(o.CPUStates.ValueSize()); vs != size {
		return fmt.Errorf("value size %d, want %d", vs, size)
	}
	page := os.Getpagesize()
	mem, err := unix.Mmap(o.CPUStates.FD(), 0, (ncpu*size+page-1)/page*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	o.mem = mem
	o.cpus = unsafe.Slice((*schedCpuState)(unsafe.Pointer(&mem[0])), ncpu)
	return nil
}

// setGen tells every CPU that the tracked set changed.
func (o *schedObjs) setGen(gen uint32) {
	for i := range o.cpus {
		atomic.StoreUint32(&o.cpus[i].Gen, gen)
	}
}

// setThreshold sets the wait that raises an event on every CPU.
func (o *schedObjs) setThreshold(ns uint64) {
	for i := range o.cpus {
		atomic.StoreUint64(&o.cpus[i].Threshold, ns)
	}
}

// setAllCulprits turns the attribution of waits to every culprit on or off
// on every CPU.
func (o *schedObjs) setAllCulprits(on bool) {
	v := uint32(0)
	if on {
		v = 1
	}
	for i := range o.cpus {
		atomic.StoreUint32(&o.cpus[i].AllCulprits, v)
	}
}

// addResident adds to c the counters that CPUs keep for the cgroup tracked
// with epoch. An entry is read only while it holds that epoch before and
// after the read (sched.c publishes an entry's epoch last and clears it
// first).
func (o *schedObjs) addResident(c *schedSchedCounters, epoch uint32) {
	for i := range o.cpus {
		cpu := &o.cpus[i]
		for j := range cpu.ResEpoch {
			if atomic.LoadUint32(&cpu.ResEpoch[j]) != epoch {
				continue
			}
			var r schedSchedCounters
			res := &cpu.Res[j].C
			r.OncpuNs = atomic.LoadUint64(&res.OncpuNs)
			r.Sleeps = atomic.LoadUint64(&res.Sleeps)
			r.RunqCount = atomic.LoadUint64(&res.RunqCount)
			r.RunqSumNs = atomic.LoadUint64(&res.RunqSumNs)
			r.DelayedNs = atomic.LoadUint64(&res.DelayedNs)
			for k := range r.RunqHist {
				r.RunqHist[k] = atomic.LoadUint64(&res.RunqHist[k])
			}
			if atomic.LoadUint32(&cpu.ResEpoch[j]) == epoch {
				addSched(c, &r)
			}
		}
	}
}

// busy appends to ids the cgroups a CPU is running (cur_cgroup) and to
// epochs the epochs of the cgroups whose counters a CPU keeps resident:
// counters that may move without a changed mark, or have a run not yet
// counted.
func (o *schedObjs) busy(ids []uint64, epochs []uint32) ([]uint64, []uint32) {
	for i := range o.cpus {
		cpu := &o.cpus[i]
		if id := atomic.LoadUint64(&cpu.CurCgroup); id != 0 {
			ids = append(ids, id)
		}
		for j := range cpu.ResEpoch {
			if e := atomic.LoadUint32(&cpu.ResEpoch[j]); e != 0 {
				epochs = append(epochs, e)
			}
		}
	}
	return ids, epochs
}

// running reports whether a CPU's current task is in the cgroup, as the
// last switch this CPU's program saw says (cur_cgroup: tracked cgroups only).
func (o *schedObjs) running(cgroupID uint64) bool {
	for i := range o.cpus {
		if atomic.LoadUint64(&o.cpus[i].CurCgroup) == cgroupID {
			return true
		}
	}
	return false
}

func addSched(c, v *schedSchedCounters) {
	c.OncpuNs += v.OncpuNs
	c.Sleeps += v.Sleeps
	c.RunqCount += v.RunqCount
	c.RunqSumNs += v.RunqSumNs
	c.DelayedNs += v.DelayedNs
	for i := range c.RunqHist {
		c.RunqHist[i] += v.RunqHist[i]
	}
}

// Close closes the programs and the maps user space holds (the kernel keeps
// the others as long as a program uses them).
func (o *schedObjs) Close() error {
	var errs []error
	if o.mem != nil {
		o.cpus = nil
		errs = append(errs, unix.Munmap(o.mem))
		o.mem = nil
	}
	for _, c := range []interface{ Close() error }{o.CPUStates, o.Delays, o.Events, o.CulpritStates} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	for _, p := range o.points {
		errs = append(errs, p.prog.Close())
	}
	return errors.Join(errs...)
}
