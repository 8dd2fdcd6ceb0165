package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// followInterval is how often "logs --follow" asks the agent for more
// output; tests shorten it.
var followInterval = 500 * time.Millisecond

// sandboxWait bounds how long "logs" waits for the output of a task still
// launching (STAGING or STARTING: its agent may not have created the
// sandbox yet) before it answers not_found, asking again every
// followInterval. A task read right after it was launched (the README's
// job tour, run as a script) then prints its output instead of failing.
const sandboxWait = 30 * time.Second

const (
	defaultTail = 64 << 10
	// maxRead is the most bytes the agent returns per ReadSandboxFile.
	maxRead = 1 << 20
)

type logsOptions struct {
	stderr    bool
	framework string
	tail      int64
	follow    bool
	raw       bool
}

// newLogsCommand is "logs TASK": a task's stdout or stderr, read from its
// sandbox through the coordinator's node proxy, which checks that the
// caller may read the task's sandbox and asks the agent with its own
// identity.
func newLogsCommand(g *globals) *cobra.Command {
	var o logsOptions
	cmd := &cobra.Command{
		Use:   "logs TASK",
		Short: "Print a task's stdout (or stderr) from its sandbox (TASK: its id or name); -f follows it",
		Long: `Print the end of a task's stdout (or stderr with --stderr), read from the
task's sandbox on its agent, through the coordinator: it checks that the
caller is the task's framework principal or has access_sandboxes on it, then
asks the agent with its own identity (the caller's token never reaches an
agent). With -f the command keeps
printing what the task writes until interrupted. Control characters other than
newline and tab (terminal escape sequences) are printed escaped, as "\x1b";
--raw prints the file's bytes as they are.`,
		Args: exactArgs("TASK"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.tail < -1 {
				return usageErrorf("logs: --tail %d: want a number of bytes, 0 for none or -1 for the whole file", o.tail)
			}
			if err := o.run(cmd.Context(), g, args[0]); err != nil {
				return fmt.Errorf("logs: %w", err)
			}
			return nil
		},
	}
	flags := cmd.Flags()
	flags.BoolVar(&o.stderr, "stderr", false, "print stderr instead of stdout")
	flags.StringVar(&o.framework, "framework", "", "framework of the task, by name or id (needed when several frameworks use the task id or name)")
	flags.Int64Var(&o.tail, "tail", defaultTail, "print the last N bytes first (0: none, -1: the whole file)")
	flags.BoolVarP(&o.follow, "follow", "f", false, "keep printing new output until interrupted")
	flags.BoolVar(&o.raw, "raw", false, "print the output's bytes unescaped, terminal escape sequences included")
	return cmd
}

func (o *logsOptions) run(ctx context.Context, g *globals, taskID string) error {
	frameworkID := o.framework
	if frameworkID != "" {
		var err error
		if frameworkID, err = g.resolveFramework(ctx, frameworkID); err != nil {
			return fmt.Errorf("--framework: %w", err)
		}
	}
	task, err := g.findTask(ctx, taskID, frameworkID)
	if err != nil {
		return err
	}
	frameworkID, taskID = task.GetFrameworkId(), task.GetTaskId() // taskID may have been the task's name
	node := g.node(task.GetAgentId())
	var out io.Writer = g.out
	if !o.raw {
		escaping := &escapingWriter{w: g.out}
		defer escaping.Close()
		out = escaping
	}
	path := "stdout"
	if o.stderr {
		path = "stderr"
	}
	read := func(offset, length int64) (*slacklinev1.ReadSandboxFileResponse, error) {
		resp, err := node.ReadSandboxFile(ctx, connect.NewRequest(&slacklinev1.ReadSandboxFileRequest{
			FrameworkId: frameworkID, TaskId: taskID, Path: path, Offset: offset, Length: length,
		}))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	if st := task.GetState(); st == slacklinev1.TaskState_TASK_STATE_STAGING || st == slacklinev1.TaskState_TASK_STATE_STARTING {
		if err := waitForOutput(ctx, func() error { _, err := read(-1, 1); return err }); err != nil {
			return err
		}
	}
	// copyFrom prints the file from offset up to its size, at most maxRead
	// bytes per call, and returns the offset after what it printed.
	copyFrom := func(offset int64) (int64, error) {
		for {
			resp, err := read(offset, maxRead)
			if err != nil {
				return offset, err
			}
			if _, err := out.Write(resp.GetData()); err != nil {
				return offset, err
			}
			// The agent moves an offset beyond the end (the file was
			// truncated) back to the end.
			offset = resp.GetOffset() + int64(len(resp.GetData()))
			if len(resp.GetData()) == 0 || offset >= resp.GetSize() {
				return offset, nil
			}
		}
	}

	// The tail: the last o.tail bytes as of the first read.
	var next int64
	switch o.tail {
	case 0:
		resp, err := read(-1, 1)
		if err != nil {
			return err
		}
		next = resp.GetSize()
	case -1:
		var err error
		if next, err = copyFrom(0); err != nil {
			return err
		}
	default:
		resp, err := read(-o.tail, min(o.tail, maxRead))
		if err != nil {
			return err
		}
		if _, err := out.Write(resp.GetData()); err != nil {
			return err
		}
		next = resp.GetOffset() + int64(len(resp.GetData()))
		if next < resp.GetSize() { // a tail longer than one read
			if next, err = copyFrom(next); err != nil {
				return err
			}
		}
	}
	if !o.follow {
		return nil
	}

	ticker := time.NewTicker(followInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil // interrupted: the normal end of --follow
		case <-ticker.C:
		}
		var err error
		if next, err = copyFrom(next); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// waitForOutput calls probe until it finds the output (any answer but
// not_found), sandboxWait passes or ctx ends; it returns probe's last
// error.
func waitForOutput(ctx context.Context, probe func() error) error {
	deadline := time.Now().Add(sandboxWait)
	for {
		err := probe()
		if connect.CodeOf(err) != connect.CodeNotFound || !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(followInterval):
		}
	}
}
