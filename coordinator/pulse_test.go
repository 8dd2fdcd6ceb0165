package coordinator

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestPulse checks that streams sharing one pulse each send a keepalive
// once per period, that queued entries go out between beats without moving
// them, and that no timer is left armed once no stream waits.
func TestPulse(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const period = 10 * time.Second
		start := time.Now()
		beats := newPulse(period)
		var mu sync.Mutex
		sent := map[string][]string{} // per stream: "<seconds since start> <value>"
		serve := func(name string, o *outbox[string]) chan error {
			done := make(chan error, 1)
			go func() {
				done <- o.serve(context.Background(), "keepalive", beats, func(v string) error {
					mu.Lock()
					defer mu.Unlock()
					sent[name] = append(sent[name], time.Since(start).String()+" "+v)
					return nil
				})
			}()
			return done
		}
		a, b := newOutbox[string](), newOutbox[string]()
		doneA, doneB := serve("a", a), serve("b", b)
		time.Sleep(15 * time.Second)
		a.send("event")
		time.Sleep(20 * time.Second) // 35 s in all
		a.end(nil)
		b.end(nil)
		for _, done := range []chan error{doneA, doneB} {
			if err := <-done; err != nil {
				t.Fatalf("serve: %v", err)
			}
		}
		want := map[string][]string{
			"a": {"10s keepalive", "15s event", "20s keepalive", "30s keepalive"},
			"b": {"10s keepalive", "20s keepalive", "30s keepalive"},
		}
		if diff := cmp.Diff(want, sent); diff != "" {
			t.Fatalf("sent (-want +got):\n%s", diff)
		}
		// The beat armed for 40 s fires, and none is armed after it.
		time.Sleep(period)
		synctest.Wait()
		beats.mu.Lock()
		defer beats.mu.Unlock()
		if beats.armed || beats.waiting != nil {
			t.Fatal("a beat is armed with no stream waiting")
		}
	})
}

// TestSupersededStream checks a stream that claims an outbox another stream
// serves: the older ends (errSuperseded as its context's cause) without
// taking the keepalives or the queue with it, and the newer sends both.
func TestSupersededStream(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const period = 10 * time.Second
		start := time.Now()
		beats := newPulse(period)
		o := newOutbox[string]()
		var mu sync.Mutex
		sent := map[string][]string{}
		serve := func(name string) (chan error, context.Context) {
			ctx, release := o.claim(context.Background())
			done := make(chan error, 1)
			go func() {
				defer release()
				done <- o.serve(ctx, "keepalive", beats, func(v string) error {
					mu.Lock()
					defer mu.Unlock()
					sent[name] = append(sent[name], time.Since(start).String()+" "+v)
					return nil
				})
			}()
			return done, ctx
		}
		doneOld, oldCtx := serve("old")
		time.Sleep(15 * time.Second)
		doneNew, _ := serve("new")
		if err := <-doneOld; !errors.Is(err, context.Canceled) || !errors.Is(context.Cause(oldCtx), errSuperseded) {
			t.Fatalf("old stream ended with %v (cause %v), want canceled by errSuperseded", err, context.Cause(oldCtx))
		}
		o.send("command")
		time.Sleep(20 * time.Second) // 35 s in all
		o.end(nil)
		if err := <-doneNew; err != nil {
			t.Fatalf("new stream: %v", err)
		}
		want := map[string][]string{
			"old": {"10s keepalive"},
			"new": {"15s command", "20s keepalive", "30s keepalive"},
		}
		if diff := cmp.Diff(want, sent); diff != "" {
			t.Fatalf("sent (-want +got):\n%s", diff)
		}
	})
}

// TestSupersededStreamTakesNothing checks that a stream whose outbox a newer
// stream claimed takes nothing from it, however late it looks.
func TestSupersededStreamTakesNothing(t *testing.T) {
	t.Parallel()
	o := newOutbox[string]()
	older, releaseOlder := o.claim(context.Background())
	defer releaseOlder()
	o.send("command")
	newer, releaseNewer := o.claim(context.Background())
	defer releaseNewer()
	if v, ok := o.takeFor(older); ok {
		t.Fatalf("the superseded stream took %q", v)
	}
	if v, ok := o.takeFor(newer); !ok || v != "command" {
		t.Fatalf("the newer stream took %q, %v; want the command", v, ok)
	}
}

// TestSupersededStreamLeavesTheLastCommands checks that a stream superseded
// while it was writing does not deliver what the session queued before
// ending (a shutdown): the newer stream does.
func TestSupersededStreamLeavesTheLastCommands(t *testing.T) {
	t.Parallel()
	beats := newPulse(time.Hour)
	o := newOutbox[string]()
	older, releaseOlder := o.claim(context.Background())
	defer releaseOlder()
	var olderSent []string
	writing, unblock := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		send := func(v string) error {
			olderSent = append(olderSent, v)
			if v == "launch" {
				close(writing)
				<-unblock // a connection nobody reads
			}
			return nil
		}
		err := o.serve(older, "keepalive", beats, send)
		if err == nil {
			err = o.sendQueued(older, send)
		}
		done <- err
	}()
	o.send("launch")
	<-writing
	newer, releaseNewer := o.claim(context.Background())
	defer releaseNewer()
	o.send("shutdown")
	o.endAfterDelivery()
	close(unblock)
	if err := <-done; !errors.Is(context.Cause(older), errSuperseded) || err == nil {
		t.Fatalf("older stream ended with %v (cause %v), want an error caused by errSuperseded", err, context.Cause(older))
	}
	var newerSent []string
	send := func(v string) error { newerSent = append(newerSent, v); return nil }
	if err := o.serve(newer, "keepalive", beats, send); err != nil {
		t.Fatal(err)
	}
	if err := o.sendQueued(newer, send); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"launch"}, olderSent); diff != "" {
		t.Errorf("older stream sent (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"shutdown"}, newerSent); diff != "" {
		t.Errorf("newer stream sent (-want +got):\n%s", diff)
	}
}
