package coordinator

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

// BenchmarkHeartbeat measures one agent heartbeat through the coordinator
// served as the binary serves it (server.Serve, cleartext HTTP/2, default
// timeouts and limits), client included: compare it with
// internal/server's BenchmarkServeUnary, the same request to a bare
// handler, to see what the coordinator's stack adds to the transport.
func BenchmarkHeartbeat(b *testing.B) {
	client, beat := benchAgent(b)
	ctx := b.Context()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := client.Heartbeat(ctx, connect.NewRequest(beat)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeartbeatStream is BenchmarkHeartbeat on a HeartbeatStream:
// one beat and its answer per iteration, on one long-lived stream.
func BenchmarkHeartbeatStream(b *testing.B) {
	client, beat := benchAgent(b)
	stream := client.HeartbeatStream(b.Context())
	defer func() {
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	}()
	req := &slacklinev1.HeartbeatStreamRequest{AgentId: beat.GetAgentId(), SessionId: beat.GetSessionId()}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := stream.Send(req); err != nil {
			b.Fatal(err)
		}
		if _, err := stream.Receive(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeartbeatStreamAnswerEvery3 is BenchmarkHeartbeatStream as
// agent/session beats: only every third beat asks for an answer and waits
// for it, the others set no_answer (compare ns/op: the coordinator and
// its client per beat). Beats sent back to back may share the server's
// reads, which beats seconds apart do not: scripts/bench/scale gives the
// coordinator's CPU per beat at scale.
func BenchmarkHeartbeatStreamAnswerEvery3(b *testing.B) {
	client, beat := benchAgent(b)
	stream := client.HeartbeatStream(b.Context())
	defer func() {
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	}()
	ask := &slacklinev1.HeartbeatStreamRequest{AgentId: beat.GetAgentId(), SessionId: beat.GetSessionId()}
	skip := &slacklinev1.HeartbeatStreamRequest{AgentId: beat.GetAgentId(), SessionId: beat.GetSessionId(), NoAnswer: true}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		req := skip
		if i%3 == 2 {
			req = ask
		}
		if err := stream.Send(req); err != nil {
			b.Fatal(err)
		}
		if req == ask {
			if _, err := stream.Receive(); err != nil {
				b.Fatal(err)
			}
		}
		i++
	}
}

// benchAgent serves a coordinator as the binary does and registers one
// agent with a client that speaks cleartext HTTP/2 only and sends a
// streamed message in one frame, as agents do (server.WholeMessages).
func benchAgent(b *testing.B) (slacklinev1connect.AgentServiceClient, *slacklinev1.HeartbeatRequest) {
	cfg := Config{WorkDir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), AgentHeartbeatInterval: time.Hour, AgentTimeout: 2 * time.Hour}
	c, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served, ran := make(chan error, 1), make(chan error, 1)
	go func() { served <- server.Serve(ctx, server.Config{Listener: ln, Logger: cfg.Logger}, c.Handler()) }()
	go func() { ran <- c.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-served; <-ran })

	transport := &http.Transport{Protocols: new(http.Protocols)}
	transport.Protocols.SetUnencryptedHTTP2(true)
	b.Cleanup(transport.CloseIdleConnections)
	// As an agent sends: a streamed beat in one HTTP/2 frame.
	client := slacklinev1connect.NewAgentServiceClient(&http.Client{Transport: server.WholeMessages(transport)}, "http://"+ln.Addr().String())
	reg, err := client.Register(ctx, connect.NewRequest(&slacklinev1.RegisterRequest{
		ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
		AgentInfo:       &slacklinev1.AgentInfo{Hostname: "bench", Resources: resources.MustParse("cpus:4;mem:4096").Proto("", resources.Regular)},
	}))
	if err != nil {
		b.Fatal(err)
	}
	return client, &slacklinev1.HeartbeatRequest{AgentId: reg.Msg.GetAgentId(), SessionId: reg.Msg.GetSessionId()}
}
