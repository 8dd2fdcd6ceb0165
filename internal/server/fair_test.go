package server_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/slackline/slackline/internal/server"
)

// TestCallLimiter floods the server from one caller and checks that
// another caller's call is answered at once, that the flooder never has
// more than Limit calls in progress, and that its waiting calls all
// complete.
func TestCallLimiter(t *testing.T) {
	const limit = 2
	release := make(chan struct{})
	var inProgress, most atomic.Int32
	waits := make(chan string, 10)
	limiter := &server.CallLimiter{
		Limit:  limit,
		Key:    func(_ context.Context, p connect.Peer) string { return p.Query.Get("caller") },
		OnWait: func(caller string) { waits <- caller },
	}
	mux := http.NewServeMux()
	mux.Handle("/test.v1.Test/Call", connect.NewUnaryHandler("/test.v1.Test/Call",
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[emptypb.Empty], error) {
			if req.Msg.GetValue() == "flood" {
				n := inProgress.Add(1)
				defer inProgress.Add(-1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				<-release
			}
			return connect.NewResponse(&emptypb.Empty{}), nil
		}, connect.WithInterceptors(limiter)))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	call := func(caller, value string) error {
		client := connect.NewClient[wrapperspb.StringValue, emptypb.Empty](srv.Client(), srv.URL+"/test.v1.Test/Call?caller="+caller, connect.WithHTTPGet())
		_, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String(value)))
		return err
	}

	var flood sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		flood.Go(func() { errs <- call("flooder", "flood") })
	}
	for range 10 - limit {
		select {
		case caller := <-waits:
			if caller != "flooder" {
				t.Fatalf("%s waits", caller)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the flooder's calls beyond the limit do not wait")
		}
	}
	if err := call("other", "quick"); err != nil {
		t.Fatalf("another caller's call: %v", err)
	}
	close(release)
	flood.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a flooder's call: %v", err)
		}
	}
	if got := most.Load(); got != limit {
		t.Fatalf("the flooder had up to %d calls in progress, want %d", got, limit)
	}
}
