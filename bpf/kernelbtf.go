package bpf

import (
	"sync/atomic"

	"github.com/cilium/ebpf/btf"
)

// kernelBTF is the process's decoded kernel BTF, shared by the probes and
// every program load (CO-RE relocations and tp_btf attach targets):
// decoding /sys/kernel/btf/vmlinux costs tens of milliseconds of CPU each
// time, and cilium/ebpf decodes it afresh for every collection unless
// given a cache.
var kernelBTF atomic.Pointer[btf.Cache]

func init() { kernelBTF.Store(btf.NewCache()) }

// KernelBTF returns the shared cache of the kernel's BTF, for
// ebpf.CollectionOptions.Cache and the probes of other packages (netqos).
// It is safe for concurrent use.
func KernelBTF() *btf.Cache { return kernelBTF.Load() }

// ReleaseKernelBTF drops the decoded kernel BTF once the programs are
// loaded, so that a long-running process does not keep it in memory; a
// later probe or load decodes it again.
func ReleaseKernelBTF() { kernelBTF.Store(btf.NewCache()) }

// kernelSpec returns the kernel's BTF from the shared cache.
func kernelSpec() (*btf.Spec, error) { return KernelBTF().Kernel() }
