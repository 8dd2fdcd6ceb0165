package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// ErrPermission reports that the process lacks the privileges a feature
// needs (EPERM or EACCES from the kernel: not root, no CAP_BPF/CAP_PERFMON/
// CAP_SYS_ADMIN, or kernel.unprivileged_bpf_disabled).
var ErrPermission = errors.New("no permission")

// ErrNotTracked is returned by Stats and Untrack for a cgroup that is not tracked.
var ErrNotTracked = errors.New("cgroup not tracked")

// ErrUnavailable is returned by Monitor methods whose programs could not be
// loaded or attached on this host (see Monitor.Attached and Probe for why).
var ErrUnavailable = errors.New("eBPF signal unavailable on this host")

// ErrLoading marks a feature whose probe or programs are still being
// loaded (FeatureResult.Status: FeatureLoading): a process may start
// serving before its optional programs are verified.
var ErrLoading = errors.New("still loading")

// classify maps a kernel error onto the probe contract: ErrPermission for
// EPERM/EACCES, ebpf.ErrNotSupported for errors meaning the kernel lacks the
// feature; anything else is returned as is ("could not tell").
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrPermission), errors.Is(err, ebpf.ErrNotSupported):
		return err
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: %w", ErrPermission, err)
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.E2BIG), errors.Is(err, unix.ENOTSUP),
		errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, errENOTSUPP), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.ENOENT),
		errors.Is(err, unix.ESRCH):
		return fmt.Errorf("%w: %w", ebpf.ErrNotSupported, err)
	}
	return err
}

// errENOTSUPP is the kernel-internal ENOTSUPP (524) some BPF paths leak.
const errENOTSUPP = unix.Errno(524)

// Classify maps a kernel error onto the probe contract, for the packages
// below bpf/ that load programs of their own (bpf/netqos): ErrPermission,
// ebpf.ErrNotSupported, or err unchanged when it cannot tell.
func Classify(err error) error { return classify(err) }
