package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// Checkpoint buckets and keys.
const (
	bucketMeta    = "meta"
	bucketTasks   = "tasks"
	bucketUpdates = "updates"
	keyAgentID    = "agent_id"
	keyBootID     = "boot_id"
)

// checkpoint persists what the agent must not forget across restarts.
type checkpoint struct {
	kv store.Store
}

func openCheckpoint(workDir string) (*checkpoint, error) {
	kv, err := store.OpenBoltFile(filepath.Join(workDir, "checkpoint.db"), 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	return &checkpoint{kv: kv}, nil
}

func (c *checkpoint) Close() error { return c.kv.Close() }

func taskRecordKey(frameworkID, taskID string) string { return frameworkID + "\x00" + taskID }

func (c *checkpoint) meta(ctx context.Context) (agentID, bootID string, err error) {
	m, err := c.kv.Load(ctx, bucketMeta)
	if err != nil {
		return "", "", err
	}
	return string(m[keyAgentID]), string(m[keyBootID]), nil
}

func (c *checkpoint) setMeta(ctx context.Context, agentID, bootID string) error {
	return c.kv.Apply(ctx, store.Put(bucketMeta, keyAgentID, []byte(agentID)), store.Put(bucketMeta, keyBootID, []byte(bootID)))
}

func (c *checkpoint) putTask(ctx context.Context, rec *slacklinev1.AgentTaskRecord) error {
	b, err := proto.Marshal(rec)
	if err != nil {
		return err
	}
	return c.kv.Apply(ctx, store.Put(bucketTasks, taskRecordKey(rec.GetTask().GetFrameworkId(), rec.GetTask().GetTask().GetTaskId()), b))
}

func (c *checkpoint) deleteTask(ctx context.Context, frameworkID, taskID string) error {
	return c.kv.Apply(ctx, store.Delete(bucketTasks, taskRecordKey(frameworkID, taskID)))
}

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

func (c *checkpoint) putUpdate(ctx context.Context, key string, rec *slacklinev1.AgentStatusRecord) error {
	b, err := proto.Marshal(rec)
	if err != nil {
		return err
	}
	return c.kv.Apply(ctx, store.Put(bucketUpdates, key, b))
}

func (c *checkpoint) deleteUpdate(ctx context.Context, key string) error {
	return c.kv.Apply(ctx, store.Delete(bucketUpdates, key))
}

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

// bootID identifies the current boot of the host.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
