package frameworkapi_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/slackline/slackline/coordinator"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
	"github.com/slackline/slackline/sim"
)

// startLocalCluster starts a real coordinator on a loopback port with one
// simulated agent (cpus:4;mem:4096) and returns the coordinator's URL and a
// function that stops everything.
func startLocalCluster() (string, func()) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir, err := os.MkdirTemp("", "frameworkapi-example")
	if err != nil {
		panic(err)
	}
	coord, err := coordinator.New(coordinator.Config{WorkDir: dir, Logger: quiet})
	if err != nil {
		panic(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	url := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	go func() { coord.Run(ctx); done <- struct{}{} }()
	go func() {
		server.Serve(ctx, server.Config{Listener: ln, Logger: quiet}, coord.Handler())
		done <- struct{}{}
	}()
	fleet, err := sim.NewFleet(sim.Config{Coordinator: url, Count: 1, Resources: resources.MustParse("cpus:4;mem:4096"), Logger: quiet})
	if err != nil {
		panic(err)
	}
	go func() { fleet.Run(ctx); done <- struct{}{} }()
	return url, func() {
		cancel()
		for range 3 {
			<-done
		}
		coord.Close()
		os.RemoveAll(dir)
	}
}
