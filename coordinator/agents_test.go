package coordinator

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestNewerCommandStreamSupersedes checks that a second Connect stream for
// an agent's session (what an agent whose old connection is half open
// sends) ends the first with Aborted, and that the session's commands go to
// the newer stream alone.
func TestNewerCommandStreamSupersedes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		agent := tc.registerAgent("host-a", "cpus:4;mem:4096") // its stream is the first
		client := newAgentClient(tc)
		open := func() *connect.ServerStreamForClient[slacklinev1.ConnectResponse] {
			t.Helper()
			stream, err := client.Connect(context.Background(), connect.NewRequest(&slacklinev1.ConnectRequest{AgentId: agent.id, SessionId: agent.session}))
			if err != nil {
				t.Fatal(err)
			}
			if !stream.Receive() { // the first ping: the stream is open
				t.Fatalf("second stream: %v", stream.Err())
			}
			t.Cleanup(func() { stream.Close() })
			return stream
		}
		second := open()
		select {
		case _, ok := <-agent.commands:
			if ok {
				t.Fatal("the superseded stream got a command")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the first stream did not end when a second one opened")
		}

		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
		if err := launch(fw, fw.nextOffer(), refuse(0), taskInfo("t1", "cpus:1;mem:512")); err != nil {
			t.Fatal(err)
		}
		for second.Receive() {
			if run := second.Msg().GetCommand().GetRunTask(); run != nil {
				if run.GetTask().GetTaskId() != "t1" {
					t.Fatalf("run_task %v, want t1", run)
				}
				break
			}
		}
		if second.Err() != nil {
			t.Fatalf("second stream ended before run_task: %v", second.Err())
		}

		open() // supersedes the second
		for second.Receive() {
		}
		if code := connect.CodeOf(second.Err()); code != connect.CodeAborted {
			t.Fatalf("superseded stream ended with %v (%v), want aborted", code, second.Err())
		}
	})
}
