package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slackline/slackline/agent"
	"github.com/slackline/slackline/agent/containerizer"
	"github.com/slackline/slackline/internal/agenttest"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/privileged"
)

// TestAgentProtocol runs the agent protocol suite against the real agent,
// in-process, with real cgroups (its tasks are supervised by the built
// slackline-agent binary); sim runs the same suite against the simulator.
func TestAgentProtocol(t *testing.T) {
	privileged.Require(t)
	var agents atomic.Int64
	agenttest.Run(t, func(t *testing.T, coordinatorURL string) func() {
		logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
		root := fmt.Sprintf("slackline-protocol-%d-%d", os.Getpid(), agents.Add(1))
		workDir := cgrouptest.WorkDir(t, root)
		cz, err := containerizer.New(containerizer.Config{
			CgroupRoot: root, StateDir: filepath.Join(workDir, "containers"), SandboxDir: filepath.Join(workDir, "sandboxes"),
			SupervisorCommand: []string{filepath.Join(binDir, "slackline-agent"), "supervise"}, Logger: logger,
			KillGracePeriod: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		a, err := agent.New(agent.Config{
			Coordinator: coordinatorURL, Listen: freeAddr(t), WorkDir: workDir, Hostname: "protocol-test",
			Resources: "cpus:2;mem:1024", Containerizer: cz, Logger: logger,
			MinBackoff: 20 * time.Millisecond, MaxBackoff: time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent Run: %v", err)
			}
			if err := a.Close(); err != nil {
				t.Errorf("agent Close: %v", err)
			}
		}
	})
}
