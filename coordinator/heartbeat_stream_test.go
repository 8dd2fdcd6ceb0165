package coordinator

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/resources"
)

// beatStream is a client's HeartbeatStream.
type beatStream = *connect.BidiStreamForClient[slacklinev1.HeartbeatStreamRequest, slacklinev1.HeartbeatStreamResponse]

// streamBeat sends one beat on s and returns the answer's interval or the
// stream's error.
func streamBeat(s beatStream, agentID, sessionID string) (time.Duration, error) {
	if err := s.Send(&slacklinev1.HeartbeatStreamRequest{AgentId: agentID, SessionId: sessionID}); err != nil {
		if _, rerr := s.Receive(); rerr != nil {
			return 0, rerr
		}
		return 0, err
	}
	resp, err := s.Receive()
	if err != nil {
		return 0, err
	}
	return time.Duration(resp.GetHeartbeatIntervalSeconds() * float64(time.Second)), nil
}

// TestHeartbeatStream: beats on a HeartbeatStream keep an agent ACTIVE as
// Heartbeat calls do and are answered with the interval; once they stop,
// the agent becomes UNREACHABLE and its idle stream ends
// (DeadlineExceeded); a newer stream of the agent ends an older one
// (Aborted); a claimed stream refuses another agent's beat
// (InvalidArgument); a stale session ends the stream (FailedPrecondition),
// as it refuses a Heartbeat call.
func TestHeartbeatStream(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := fastConfig(t.TempDir())
		tc := startPipeCluster(t, cfg)
		// HeartbeatStream needs HTTP/2: a client that speaks only h2c.
		h2c := tc.client.Transport.(*http.Transport).Clone()
		h2c.Protocols = new(http.Protocols)
		h2c.Protocols.SetUnencryptedHTTP2(true)
		defer h2c.CloseIdleConnections()
		client := slacklinev1connect.NewAgentServiceClient(&http.Client{Transport: h2c}, tc.url)
		register := func(id, hostname string) (string, string) {
			t.Helper()
			resp, err := client.Register(context.Background(), connect.NewRequest(&slacklinev1.RegisterRequest{
				ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
				AgentInfo:       &slacklinev1.AgentInfo{Id: id, Hostname: hostname, Resources: resources.MustParse("cpus:1;mem:128").Proto("", resources.Regular)},
			}))
			if err != nil {
				t.Fatalf("register %s: %v", hostname, err)
			}
			return resp.Msg.GetAgentId(), resp.Msg.GetSessionId()
		}
		state := func(id string) slacklinev1.AgentState {
			tc.c.mu.Lock()
			defer tc.c.mu.Unlock()
			return tc.c.agents[id].State
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()

		a, aSession := register("", "host-a")
		b, bSession := register("", "host-b")
		first := client.HeartbeatStream(ctx)
		// Beats for three agent timeouts keep host-a ACTIVE.
		for at := time.Duration(0); at < 3*cfg.AgentTimeout; at += cfg.AgentHeartbeatInterval {
			interval, err := streamBeat(first, a, aSession)
			if err != nil {
				t.Fatalf("beat at %v: %v", at, err)
			}
			if interval <= 0 {
				t.Fatalf("beat at %v answered with interval %v, want the agents' interval", at, interval)
			}
			time.Sleep(cfg.AgentHeartbeatInterval)
		}
		if got := state(a); got != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
			t.Fatalf("host-a is %v after beating on its stream, want ACTIVE", got)
		}
		if got := state(b); got != slacklinev1.AgentState_AGENT_STATE_UNREACHABLE {
			t.Fatalf("host-b is %v without beats, want UNREACHABLE", got)
		}

		// The stream is host-a's: host-b's beat ends it.
		if _, err := streamBeat(first, b, bSession); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Fatalf("host-b's beat on host-a's stream: %v, want InvalidArgument", err)
		}
		second, third := client.HeartbeatStream(ctx), client.HeartbeatStream(ctx)
		if _, err := streamBeat(second, a, aSession); err != nil {
			t.Fatal(err)
		}
		if _, err := streamBeat(third, a, aSession); err != nil {
			t.Fatal(err)
		}
		if _, err := streamBeat(second, a, aSession); connect.CodeOf(err) != connect.CodeAborted {
			t.Fatalf("beat on a superseded stream: %v, want Aborted", err)
		}

		// Silent past the timeout: UNREACHABLE, and the idle stream ended
		// (the server's read timeout, a second in startPipeCluster, did
		// not end it: it beat for longer than that above).
		time.Sleep(cfg.AgentTimeout + time.Second)
		if got := state(a); got != slacklinev1.AgentState_AGENT_STATE_UNREACHABLE {
			t.Fatalf("host-a is %v once its beats stopped, want UNREACHABLE", got)
		}
		if _, err := streamBeat(third, a, aSession); connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			t.Fatalf("beat on a stream idle for the agent timeout: %v, want DeadlineExceeded", err)
		}
		// A new session makes the old one stale, on the stream as in calls.
		_, newSession := register(a, "host-a")
		fourth := client.HeartbeatStream(ctx)
		if _, err := streamBeat(fourth, a, aSession); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("beat of a stale session: %v, want FailedPrecondition", err)
		}
		fifth := client.HeartbeatStream(ctx)
		if _, err := streamBeat(fifth, a, newSession); err != nil {
			t.Fatal(err)
		}
		if got := state(a); got != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
			t.Fatalf("host-a is %v after registering again, want ACTIVE", got)
		}
		for _, s := range []beatStream{first, second, third, fourth, fifth} {
			_ = s.CloseRequest()
			_ = s.CloseResponse()
		}
	})
}
