// Package killwait kills the processes of a cgroup and waits until none is
// left, freeing their memory at once rather than when each runs to its
// exit. It is shared by the task supervisor (supervisor.Cgroup) and the
// agent's cgroups (cgroups.Paths), and stays light: the supervisor is
// started for every task and links nothing heavy.
package killwait

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Group is a cgroup whose processes can be listed and killed.
type Group interface {
	// Procs returns the pids of the processes in the group.
	Procs() ([]int, error)
	// Kill kills every process in the group without waiting.
	Kill() error
}

// pollEvery is how often the group is checked for processes left;
// killEvery how often the kill is repeated (harmless, and it covers a
// freeze fallback racing with a fork).
const (
	pollEvery = 10 * time.Millisecond
	killEvery = 100 * time.Millisecond
)

// KillAndWait kills every process in g and polls until none is left or ctx
// ends; name names g in the error. After each kill the killed processes'
// memory is released (ReleaseMemory).
func KillAndWait(ctx context.Context, g Group, name string) error {
	return wait(ctx, g, name, true)
}

// WaitEmpty polls until g has no process left or ctx ends, killing none.
func WaitEmpty(ctx context.Context, g Group, name string) error {
	return wait(ctx, g, name, false)
}

// wait polls g until it is empty or ctx ends, killing what is left every
// killEvery when kill is set.
func wait(ctx context.Context, g Group, name string, kill bool) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	var lastKill time.Time
	for {
		pids, err := g.Procs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if kill && time.Since(lastKill) >= killEvery {
			if err := g.Kill(); err != nil {
				return err
			}
			ReleaseMemory(pids)
			lastKill = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d process(es) still in %s: %w", len(pids), name, ctx.Err())
		case <-tick.C:
		}
	}
}

// ReleaseMemory asks the kernel to free now the memory of the killed
// processes pids (process_mrelease(2), Linux 5.15+), rather than when each
// runs to its exit: a revocable task runs at SCHED_IDLE, and on a node
// whose CPUs are taken a killed one was still runnable seconds later,
// holding its memory, which a kill under memory pressure is meant to free.
// Best effort: a process already gone, not dying (a pid reused since it
// was listed) or a kernel without the call is left alone.
func ReleaseMemory(pids []int) {
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		_, _, _ = unix.Syscall(unix.SYS_PROCESS_MRELEASE, uintptr(fd), 0, 0)
		_ = unix.Close(fd)
	}
}
