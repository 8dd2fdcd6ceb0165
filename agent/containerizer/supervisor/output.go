package supervisor

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// rotatingOutput writes one of a task's output streams to its file in the
// sandbox, keeping at most limit bytes of it on disk: the file holds the
// newest output, up to half the limit; once it is full it becomes
// <file>.1, replacing the older half, and the file starts anew. It runs in
// the supervisor, as root, in a directory the task's user owns, so it opens
// only files it created itself (O_EXCL, no link followed) and gives them to
// the task's user. A write that fails (a full disk) drops the output rather
// than block the task.
type rotatingOutput struct {
	path     string
	half     int64
	uid, gid int
	f        *os.File
	size     int64
	failed   error // the first write error, reported once
}

// openRotatingOutput opens the stream's file, which Launch created for
// the task's user before the task started.
func openRotatingOutput(path string, limit int64, uid, gid int) (*rotatingOutput, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &rotatingOutput{path: path, half: max(limit/2, 1), uid: uid, gid: gid, f: f, size: info.Size()}, nil
}

// Write writes p, rotating as often as it takes; it always reports
// success so that the copy from the task's pipe goes on.
func (r *rotatingOutput) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && r.f != nil {
		if r.size >= r.half {
			if err := r.rotate(); err != nil {
				r.fail(err)
				return n, nil
			}
		}
		chunk := p[:min(int64(len(p)), r.half-r.size)]
		written, err := r.f.Write(chunk)
		r.size += int64(written)
		if err != nil {
			r.fail(err)
			return n, nil
		}
		p = p[len(chunk):]
	}
	return n, nil
}

// rotate makes the full file the older half and starts a new one.
func (r *rotatingOutput) rotate() error {
	r.f.Close()
	r.f = nil
	// rename replaces whatever <file>.1 is (a link the task made
	// included) without following it.
	if err := os.Rename(r.path, r.path+".1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("rotate %s: %w", r.path, err)
	}
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o640)
	if errors.Is(err, os.ErrExist) {
		// The task made one meanwhile: take the name back.
		if err := os.Remove(r.path); err != nil {
			return fmt.Errorf("rotate %s: %w", r.path, err)
		}
		f, err = os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o640)
	}
	if err != nil {
		return fmt.Errorf("rotate %s: %w", r.path, err)
	}
	if err := f.Chown(r.uid, r.gid); err != nil {
		f.Close()
		return fmt.Errorf("rotate %s: %w", r.path, err)
	}
	r.f, r.size = f, 0
	return nil
}

func (r *rotatingOutput) fail(err error) {
	if r.failed == nil {
		r.failed = err
		fmt.Fprintf(os.Stderr, "supervisor[%d]: task output dropped from now on: %v\n", os.Getpid(), err)
	}
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

func (r *rotatingOutput) Close() error {
	if r.f == nil {
		return nil
	}
	return r.f.Close()
}

// outputPipes gives the task pipes for stdout and stderr and copies them to
// rotating files; Wait returns once the task and everything that inherited
// the pipes closed them.
type outputPipes struct {
	stdout, stderr *os.File // the task's ends
	wg             sync.WaitGroup
}

// startOutput opens the rotating files and starts copying. On error
// nothing is left open.
func startOutput(spec LaunchSpec) (*outputPipes, error) {
	uid, gid := -1, -1
	if spec.User != nil {
		uid, gid = int(spec.User.UID), int(spec.User.GID)
	}
	o := &outputPipes{}
	var opened []io.Closer
	fail := func(err error) (*outputPipes, error) {
		for _, c := range opened {
			c.Close()
		}
		return nil, err
	}
	for _, stream := range []struct {
		path string
		end  **os.File
	}{{spec.Stdout, &o.stdout}, {spec.Stderr, &o.stderr}} {
		out, err := openRotatingOutput(stream.path, spec.OutputLimit, uid, gid)
		if err != nil {
			return fail(err)
		}
		opened = append(opened, out)
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		opened = append(opened, r, w)
		*stream.end = w
		o.wg.Go(func() {
			_, _ = io.Copy(out, r)
			r.Close()
			out.Close()
		})
	}
	return o, nil
}

// taskOutput returns what the task writes its stdout and stderr to: pipes
// copied to rotating files when spec.OutputLimit is positive (and the
// copy, to wait for), else the files themselves. The caller closes both
// once the task holds them.
func taskOutput(spec LaunchSpec) (stdout, stderr *os.File, copying *outputPipes, err error) {
	if spec.OutputLimit > 0 {
		o, err := startOutput(spec)
		if err != nil {
			return nil, nil, nil, err
		}
		return o.stdout, o.stderr, o, nil
	}
	open := func(path string) (*os.File, error) {
		// Created by Launch, owned by the task's user: never follow a link.
		return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW, 0)
	}
	if stdout, err = open(spec.Stdout); err != nil {
		return nil, nil, nil, err
	}
	if stderr, err = open(spec.Stderr); err != nil {
		stdout.Close()
		return nil, nil, nil, err
	}
	return stdout, stderr, nil, nil
}

// wait waits until the output is copied (every writer closed its end), at
// most timeout; nil waits for nothing.
func (o *outputPipes) wait(timeout time.Duration) {
	if o == nil {
		return
	}
	done := make(chan struct{})
	go func() { o.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
	}
}
