package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

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
		root := cgrouptest.PriorityRoot(fmt.Sprintf("slackline-protocol-%d-%d", os.Getpid(), agents.Add(1)))
		opts := testAgentOptions(t, root, coordinatorURL, logger)
		opts.Hostname, opts.Resources = "protocol-test", "cpus:2;mem:1024"
		opts.MinBackoff, opts.MaxBackoff = 20*time.Millisecond, time.Second
		a, err := opts.Build()
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
