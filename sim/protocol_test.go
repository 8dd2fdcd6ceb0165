package sim_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/slackline/slackline/internal/agenttest"
	"github.com/slackline/slackline/sim"
)

// TestProtocol runs the agent protocol suite against a simulated agent;
// e2e runs the same suite against the real agent.
func TestProtocol(t *testing.T) {
	agenttest.Run(t, func(t *testing.T, coordinatorURL string) func() {
		fleet, err := sim.NewFleet(sim.Config{
			Coordinator: coordinatorURL,
			Resources:   testResources,
			Count:       1,
			BackoffMin:  20 * time.Millisecond,
			BackoffMax:  time.Second,
			Logger:      slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- fleet.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	})
}
