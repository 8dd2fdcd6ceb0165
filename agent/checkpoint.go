package agent

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/agent/tasks"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/kv"
)

// Checkpoint buckets and keys.
const (
	bucketMeta    = "meta"
	bucketTasks   = "tasks"
	bucketUpdates = "updates"
	// bucketSandboxes maps tasks to their sandboxes, so logs stay readable
	// after a task ended; the oldest entries beyond maxSandboxes are pruned.
	bucketSandboxes = "sandboxes"
	maxSandboxes    = 1000
	keyAgentID      = "agent_id"
	keyBootID       = "boot_id"
)

// checkpoint persists what the agent must not forget across restarts.
type checkpoint struct {
	kv kv.Store
}

func openCheckpoint(workDir string) (*checkpoint, error) {
	db, err := kv.OpenBolt(filepath.Join(workDir, "checkpoint.db"), kv.BoltOptions{LockTimeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	return &checkpoint{kv: db}, nil
}

func (c *checkpoint) Close() error { return c.kv.Close() }

func taskRecordKey(k tasks.Key) string { return k.FrameworkID + "\x00" + k.TaskID }

func (c *checkpoint) meta(ctx context.Context) (agentID, bootID string, err error) {
	m, err := c.kv.Load(ctx, bucketMeta)
	if err != nil {
		return "", "", err
	}
	return string(m[keyAgentID]), string(m[keyBootID]), nil
}

func (c *checkpoint) setMeta(ctx context.Context, agentID, bootID string) error {
	return c.kv.Apply(ctx, kv.Put(bucketMeta, keyAgentID, []byte(agentID)), kv.Put(bucketMeta, keyBootID, []byte(bootID)))
}

// apply writes a batch of the task machine's checkpoint writes in one
// transaction.
func (c *checkpoint) apply(ctx context.Context, writes []tasks.Write, extra ...kv.Mutation) error {
	muts := make([]kv.Mutation, 0, len(writes)+len(extra))
	muts = append(muts, extra...)
	for _, w := range writes {
		switch {
		case w.Task != nil:
			b, err := proto.Marshal(w.Task)
			if err != nil {
				return fmt.Errorf("marshal task record: %w", err)
			}
			at := w.Task.GetTask()
			muts = append(muts, kv.Put(bucketTasks, taskRecordKey(tasks.Key{FrameworkID: at.GetFrameworkId(), TaskID: at.GetTask().GetTaskId()}), b))
		case w.Forget != nil:
			muts = append(muts, kv.Delete(bucketTasks, taskRecordKey(*w.Forget)))
		case w.Update != nil:
			b, err := proto.Marshal(&slacklinev1.AgentStatusRecord{FrameworkId: w.Update.FrameworkID, Status: w.Update.Status})
			if err != nil {
				return fmt.Errorf("marshal status update: %w", err)
			}
			muts = append(muts, kv.Put(bucketUpdates, w.Update.CheckpointKey, b))
		case w.Acknowledged != "":
			muts = append(muts, kv.Delete(bucketUpdates, w.Acknowledged))
		}
	}
	return c.kv.Apply(ctx, muts...)
}

// tasks returns the checkpointed task records.
func (c *checkpoint) tasks(ctx context.Context) ([]*slacklinev1.AgentTaskRecord, error) {
	raw, err := c.kv.Load(ctx, bucketTasks)
	if err != nil {
		return nil, err
	}
	out := make([]*slacklinev1.AgentTaskRecord, 0, len(raw))
	for key, b := range raw {
		rec := &slacklinev1.AgentTaskRecord{}
		if err := proto.Unmarshal(b, rec); err != nil {
			return nil, fmt.Errorf("task record %q: %w", strings.ReplaceAll(key, "\x00", "/"), err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// updates returns the checkpointed unacknowledged updates by key.
func (c *checkpoint) updates(ctx context.Context) (map[string]*slacklinev1.AgentStatusRecord, error) {
	raw, err := c.kv.Load(ctx, bucketUpdates)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*slacklinev1.AgentStatusRecord, len(raw))
	for key, b := range raw {
		rec := &slacklinev1.AgentStatusRecord{}
		if err := proto.Unmarshal(b, rec); err != nil {
			return nil, fmt.Errorf("status update record: %w", err)
		}
		out[key] = rec
	}
	return out, nil
}

// sandboxRecord is the write that records where a task's sandbox is, and
// the principal of the task's framework (who may read it), for a
// transaction of the caller's (the lifecycle's next checkpoint batch).
func sandboxRecord(k tasks.Key, path, principal string, now time.Time) kv.Mutation {
	value := strconv.FormatInt(now.UnixNano(), 10) + "|" + path + "\x00" + principal
	return kv.Put(bucketSandboxes, taskRecordKey(k), []byte(value))
}

// pruneSandboxes forgets the oldest sandbox records beyond maxSandboxes.
func (c *checkpoint) pruneSandboxes(ctx context.Context) error {
	all, err := c.kv.Load(ctx, bucketSandboxes)
	if err != nil || len(all) <= maxSandboxes {
		return err
	}
	type entry struct {
		key  string
		when int64
	}
	entries := make([]entry, 0, len(all))
	for k, v := range all {
		when, _, _ := strings.Cut(string(v), "|")
		n, _ := strconv.ParseInt(when, 10, 64)
		entries = append(entries, entry{k, n})
	}
	slices.SortFunc(entries, func(a, b entry) int { return cmp.Compare(a.when, b.when) })
	var deletes []kv.Mutation
	for _, e := range entries[:len(entries)-maxSandboxes] {
		deletes = append(deletes, kv.Delete(bucketSandboxes, e.key))
	}
	return c.kv.Apply(ctx, deletes...)
}

// sandbox returns the recorded sandbox of a task and its framework's
// principal ("" for records older than principals); an empty frameworkID
// matches any framework.
func (c *checkpoint) sandbox(ctx context.Context, frameworkID, taskID string) (path, principal string, err error) {
	all, err := c.kv.Load(ctx, bucketSandboxes)
	if err != nil {
		return "", "", err
	}
	for k, v := range all {
		fw, task, _ := strings.Cut(k, "\x00")
		if task == taskID && (frameworkID == "" || fw == frameworkID) {
			_, rest, _ := strings.Cut(string(v), "|")
			path, principal, _ = strings.Cut(rest, "\x00")
			return path, principal, nil
		}
	}
	return "", "", nil
}

// bootID identifies the current boot of the host.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
