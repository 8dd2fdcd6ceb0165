package leader

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/protocol"
	"github.com/slackline/slackline/internal/server"
)

// followerHandler answers while this member does not lead: GetState with
// the leader's URL, every other call Unavailable. Every response carries
// protocol.LeaderHeader, so clients that know the group go to the leader
// (internal/leaderclient). Followers redirect rather than proxy: a proxy
// could not pass on an agent's client certificate, would put a second
// process on the path of every long-lived stream (a session lost when
// either fails), and would hide from clients who leads.
func (m *Member) followerHandler() http.Handler {
	opts := append(server.HandlerOptions(), connect.WithInterceptors(notLeader{m}))
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewSchedulerServiceHandler(slacklinev1connect.UnimplementedSchedulerServiceHandler{}, opts...))
	mux.Handle(slacklinev1connect.NewAgentServiceHandler(slacklinev1connect.UnimplementedAgentServiceHandler{}, opts...))
	mux.Handle(slacklinev1connect.NewOperatorServiceHandler(followerOperator{m: m}, opts...))
	server.MountStandard(mux,
		slacklinev1connect.SchedulerServiceName, slacklinev1connect.AgentServiceName, slacklinev1connect.OperatorServiceName)
	authorized := m.cfg.Authz.Middleware(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leader := m.Leader()
		w.Header().Set(protocol.LeaderHeader, leader)
		if strings.HasPrefix(r.URL.Path, "/ui/") {
			http.Error(w, m.notLeader(leader).Error(), http.StatusServiceUnavailable)
			return
		}
		authorized.ServeHTTP(w, r)
	})
}

// notLeader is the error of every call a follower does not answer.
func (m *Member) notLeader(leader string) *connect.Error {
	if leader == "" {
		return connect.NewError(connect.CodeUnavailable, errors.New("this coordinator is not the leader and no leader is elected yet"))
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("this coordinator is not the leader; the leader is %s", leader))
}

// followerOperator answers GetState with the leader's URL only.
type followerOperator struct {
	slacklinev1connect.UnimplementedOperatorServiceHandler
	m *Member
}

func (f followerOperator) GetState(context.Context, *connect.Request[slacklinev1.GetStateRequest]) (*connect.Response[slacklinev1.GetStateResponse], error) {
	return connect.NewResponse(&slacklinev1.GetStateResponse{LeaderUrl: f.m.Leader()}), nil
}

// notLeader refuses every call but GetState with Unavailable.
type notLeader struct{ m *Member }

func (n notLeader) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().Procedure == slacklinev1connect.OperatorServiceGetStateProcedure {
			return next(ctx, req)
		}
		return nil, n.m.notLeader(n.m.Leader())
	}
}

func (notLeader) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (n notLeader) WrapStreamingHandler(connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(context.Context, connect.StreamingHandlerConn) error {
		return n.m.notLeader(n.m.Leader())
	}
}
