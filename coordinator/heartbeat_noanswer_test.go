package coordinator

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/resources"
)

// TestHeartbeatStreamNoAnswer: beats that ask for no answer (no_answer)
// keep an agent ACTIVE as answered ones do, and get no answer: after
// three agent timeouts of them and one beat that asks, the stream holds
// exactly one answer, which says the coordinator honours the field
// (answers_optional). A refused beat that asked for no answer still ends
// the stream with its error (a stale session: FailedPrecondition).
func TestHeartbeatStreamNoAnswer(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := fastConfig(t.TempDir())
		tc := startPipeCluster(t, cfg)
		h2c := tc.client.Transport.(*http.Transport).Clone()
		h2c.Protocols = new(http.Protocols)
		h2c.Protocols.SetUnencryptedHTTP2(true)
		defer h2c.CloseIdleConnections()
		client := slacklinev1connect.NewAgentServiceClient(&http.Client{Transport: h2c}, tc.url)
		register := func(id string) (string, string) {
			t.Helper()
			resp, err := client.Register(context.Background(), connect.NewRequest(&slacklinev1.RegisterRequest{
				ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
				AgentInfo:       &slacklinev1.AgentInfo{Id: id, Hostname: "host-a", Resources: resources.MustParse("cpus:1;mem:128").Proto("", resources.Regular)},
			}))
			if err != nil {
				t.Fatalf("register: %v", err)
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

		a, session := register("")
		s := client.HeartbeatStream(ctx)
		beats := 0
		for at := time.Duration(0); at < 3*cfg.AgentTimeout; at += cfg.AgentHeartbeatInterval {
			if err := s.Send(&slacklinev1.HeartbeatStreamRequest{AgentId: a, SessionId: session, NoAnswer: true}); err != nil {
				t.Fatalf("beat at %v: %v", at, err)
			}
			beats++
			time.Sleep(cfg.AgentHeartbeatInterval)
		}
		if got := state(a); got != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
			t.Fatalf("agent is %v after %d beats that asked for no answer, want ACTIVE", got, beats)
		}
		if err := s.Send(&slacklinev1.HeartbeatStreamRequest{AgentId: a, SessionId: session}); err != nil {
			t.Fatal(err)
		}
		if err := s.CloseRequest(); err != nil {
			t.Fatal(err)
		}
		var answers []*slacklinev1.HeartbeatStreamResponse
		for {
			resp, err := s.Receive()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("receive: %v", err)
			}
			answers = append(answers, resp)
		}
		_ = s.CloseResponse()
		if len(answers) != 1 {
			t.Fatalf("%d answers to %d beats without and one with an answer asked for, want 1", len(answers), beats)
		}
		if !answers[0].GetAnswersOptional() || answers[0].GetHeartbeatIntervalSeconds() <= 0 {
			t.Errorf("answer %v, want the interval and answers_optional", answers[0])
		}

		// A stale session, on a beat that asked for no answer.
		_, _ = register(a)
		stale := client.HeartbeatStream(ctx)
		if err := stale.Send(&slacklinev1.HeartbeatStreamRequest{AgentId: a, SessionId: session, NoAnswer: true}); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if _, err := stale.Receive(); connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Errorf("no_answer beat of a stale session: %v, want FailedPrecondition", err)
		}
		_ = stale.CloseRequest()
		_ = stale.CloseResponse()
	})
}
