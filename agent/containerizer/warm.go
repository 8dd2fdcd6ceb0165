package containerizer

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/slackline/slackline/agent/containerizer/supervisor"
)

// WarmSupervisorLimit bounds the supervisors the containerizer keeps
// started ahead of launches ("warm": waiting for a container, holding none
// of a task's state). Launch takes one instead of forking and exec'ing the
// supervisor binary on its path, and starts a replacement in the
// background; WarmSupervisorStats counts how often one was there.
const WarmSupervisorLimit = 1

// WarmSupervisorStats counts the warm supervisors' use since New.
type WarmSupervisorStats struct {
	// Hits are launches that took a warm supervisor.
	Hits uint64
	// Misses are launches that found none ready (all taken, still
	// starting, or the last one died) and started a supervisor themselves.
	Misses uint64
	// DiedIdle are warm supervisors that ended before a launch took them
	// (killed by someone else; never replaced until the next launch).
	DiedIdle uint64
	// StartFailures are warm supervisors that could not be started.
	StartFailures uint64
}

// supervisorProc is a started supervisor process, reaped by a goroutine of
// its own from its start: whoever waits for it waits for exited.
type supervisorProc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once reaped; cmd.ProcessState set
	warm   bool          // started warm ("supervise wait") and taken by a launch
}

// startSupervisorProc starts cmd, born in the supervisors' v2 cgroup
// where the kernel can, and reaps it when it ends.
func (c *Containerizer) startSupervisorProc(newCmd func() *exec.Cmd) (*supervisorProc, error) {
	// Born in the supervisors' cgroups, v2 where the kernel can and v1
	// (hybrid hosts) by inheritance from the thread that forks it, so
	// that the supervisor moves itself into none of them: a move of its
	// pid takes cgroup_threadgroup_rwsem for writing and waits for an RCU
	// grace period, holding cgroup_mutex, so that the next launch's
	// cgroup creation (and its shim's start) queued behind it. It moves
	// into what is left, if anything (a v1 hierarchy it could not be
	// born in); supervisor.BornInEnv tells it where it was born.
	cg := supervisorCgroup(c.supervisors)
	v1 := v1ProcsFiles(cg)
	cmd, _, err := supervisor.StartInCgroups(func() *exec.Cmd {
		cmd := newCmd()
		if len(v1) > 0 {
			cmd.Env = append(os.Environ(), supervisor.BornInEnv+"="+strings.Join(v1, "\n"))
		}
		return cmd
	}, cg)
	var jerr *supervisor.JoinError
	if errors.As(err, &jerr) {
		c.log.Warn("containerizer: start a supervisor in the supervisors' v1 cgroups (it moves there itself)", "err", err)
		cmd, _, err = supervisor.StartInCgroup(newCmd, cg.Unified)
	}
	if err != nil {
		return nil, err
	}
	p := &supervisorProc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		awaitChild(cmd.Process.Pid)
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// wait waits until the supervisor ended and returns its state.
func (p *supervisorProc) wait() *os.ProcessState {
	<-p.exited
	return p.cmd.ProcessState
}

// warmSupervisor is a supervisor started with "supervise wait": it
// becomes a container's when its state directory is written on stdin.
type warmSupervisor struct {
	proc   *supervisorProc
	stdin  *os.File      // write end of its stdin
	status *os.File      // read end of its status pipe (fd 3)
	taken  chan struct{} // closed when a launch took it
}

// close ends an idle warm supervisor: end of file on stdin makes it exit
// having done nothing.
func (w *warmSupervisor) close() {
	_ = w.stdin.Close()
	_ = w.status.Close()
}

// warmPool holds the warm supervisors (at most WarmSupervisorLimit ready
// or starting).
type warmPool struct {
	mu       sync.Mutex
	ready    []*warmSupervisor
	starting int
	closed   bool
	stats    WarmSupervisorStats
	// idle counts the warm supervisors starting or idle, each until a
	// launch took it or it was reaped: closeWarm waits for them.
	idle sync.WaitGroup
}

// WarmSupervisorStats returns the warm supervisors' counters.
func (c *Containerizer) WarmSupervisorStats() WarmSupervisorStats {
	c.warm.mu.Lock()
	defer c.warm.mu.Unlock()
	return c.warm.stats
}

// refillWarm starts a warm supervisor in the background unless the pool
// is full or closed.
func (c *Containerizer) refillWarm() {
	c.warm.mu.Lock()
	if c.warm.closed || len(c.warm.ready)+c.warm.starting >= WarmSupervisorLimit {
		c.warm.mu.Unlock()
		return
	}
	c.warm.starting++
	c.warm.idle.Add(1)
	c.warm.mu.Unlock()
	go func() {
		defer c.warm.idle.Done()
		w, err := c.spawnWarm()
		c.warm.mu.Lock()
		defer c.warm.mu.Unlock()
		c.warm.starting--
		switch {
		case err != nil:
			c.warm.stats.StartFailures++
			c.log.Warn("containerizer: start a warm supervisor (launches start their own)", "err", err)
		case c.warm.closed:
			w.close()
		default:
			c.warm.ready = append(c.warm.ready, w)
		}
	}()
}

// spawnWarm starts one warm supervisor; a goroutine reaps it and, if it
// ends while idle, takes it out of the pool.
func (c *Containerizer) spawnWarm() (*warmSupervisor, error) {
	root, err := filepath.Abs(c.cfg.StateDir)
	if err != nil {
		return nil, err
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return nil, err
	}
	argv := c.cfg.SupervisorCommand
	proc, err := c.startSupervisorProc(func() *exec.Cmd {
		cmd := exec.Command(argv[0], append(append([]string{}, argv[1:]...), "wait", root)...)
		cmd.Stdin = stdinR
		cmd.ExtraFiles = []*os.File{statusW} // fd 3
		// Own session: the supervisor outlives the agent and its terminal.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		return cmd
	})
	stdinR.Close()
	statusW.Close()
	if err != nil {
		stdinW.Close()
		statusR.Close()
		return nil, fmt.Errorf("start supervisor %s: %w", argv[0], err)
	}
	w := &warmSupervisor{proc: proc, stdin: stdinW, status: statusR, taken: make(chan struct{})}
	c.warm.idle.Add(1)
	go func() {
		defer c.warm.idle.Done()
		select {
		case <-w.taken:
			return
		case <-proc.exited:
		}
		c.warm.mu.Lock()
		for i, r := range c.warm.ready {
			if r == w {
				c.warm.ready = append(c.warm.ready[:i], c.warm.ready[i+1:]...)
				c.warm.stats.DiedIdle++
				w.close()
				c.log.Warn("containerizer: a warm supervisor ended before a launch took it", "pid", proc.cmd.Process.Pid, "state", proc.cmd.ProcessState.String())
				break
			}
		}
		c.warm.mu.Unlock()
	}()
	return w, nil
}

// takeWarm hands dir (the container's state directory, launch.json
// written) to a warm supervisor and returns it with the read end of its
// status pipe, or nil if none was ready or it could not take dir (it
// died). The caller starts a replacement (refillWarm) once its launch is
// off the CPU's critical path.
func (c *Containerizer) takeWarm(dir string) (*supervisorProc, *os.File) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil
	}
	for {
		c.warm.mu.Lock()
		if len(c.warm.ready) == 0 {
			c.warm.stats.Misses++
			c.warm.mu.Unlock()
			return nil, nil
		}
		w := c.warm.ready[0]
		c.warm.ready = c.warm.ready[1:]
		c.warm.mu.Unlock()
		close(w.taken)
		// One write of less than PIPE_BUF bytes: all or nothing.
		_, err := w.stdin.Write([]byte(abs + "\n"))
		_ = w.stdin.Close()
		if err == nil {
			c.warm.mu.Lock()
			c.warm.stats.Hits++
			c.warm.mu.Unlock()
			w.proc.warm = true
			return w.proc, w.status
		}
		// It died meanwhile (EPIPE): its reaper counts it no more, as it
		// left the pool; count it here and try the next.
		_ = w.status.Close()
		c.warm.mu.Lock()
		c.warm.stats.DiedIdle++
		c.warm.mu.Unlock()
	}
}

// closeWarm ends the idle warm supervisors and waits until they are reaped.
func (c *Containerizer) closeWarm() {
	c.warm.mu.Lock()
	c.warm.closed = true
	ready := c.warm.ready
	c.warm.ready = nil
	c.warm.mu.Unlock()
	for _, w := range ready {
		w.close()
	}
	c.warm.idle.Wait()
}

// v1ProcsFiles returns the cgroup.procs files of cg's v1 directories (in
// the order of Cgroup.V1Dirs).
func v1ProcsFiles(cg supervisor.Cgroup) []string {
	var files []string
	for _, d := range cg.V1Dirs() {
		files = append(files, filepath.Join(d, "cgroup.procs"))
	}
	return files
}
