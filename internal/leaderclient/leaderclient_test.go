package leaderclient

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slackline/slackline/internal/protocol"
)

// coordinator is a fake member of a group: it leads when leads is set,
// else answers 503 naming leader (which may be empty).
type coordinator struct {
	srv    *httptest.Server
	leads  atomic.Bool
	leader atomic.Pointer[string]
	calls  atomic.Int32
}

func newCoordinator(t *testing.T) *coordinator {
	c := &coordinator{}
	c.leader.Store(new(string))
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		if !c.leads.Load() {
			w.Header().Set(protocol.LeaderHeader, *c.leader.Load())
			http.Error(w, "not the leader", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "leader "+c.srv.URL+" got "+string(body)+" at "+r.URL.Path)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *coordinator) follow(leader string) { c.leader.Store(&leader) }

func post(t *testing.T, client *http.Client, base, body string) (int, string) {
	t.Helper()
	resp, err := client.Post(base+"/slackline.v1.SchedulerService/Revive", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got)
}

func TestFollowsTheLeader(t *testing.T) {
	a, b, c := newCoordinator(t), newCoordinator(t), newCoordinator(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close() // connections to it are refused
	outsider := newCoordinator(t)
	outsider.leads.Store(true)

	tests := []struct {
		name string
		// setup arranges the group and returns the URL list and the
		// coordinator that must answer.
		setup func() (string, *coordinator)
	}{
		{"first is the leader", func() (string, *coordinator) {
			a.leads.Store(true)
			return a.srv.URL + "," + b.srv.URL, a
		}},
		{"follower names the leader", func() (string, *coordinator) {
			a.follow(c.srv.URL)
			c.leads.Store(true)
			return a.srv.URL + "," + b.srv.URL + "," + c.srv.URL, c
		}},
		{"refused connection moves on", func() (string, *coordinator) {
			b.leads.Store(true)
			return dead.URL + ", " + b.srv.URL, b
		}},
		{"follower without a leader moves on", func() (string, *coordinator) {
			c.leads.Store(true)
			return a.srv.URL + "," + b.srv.URL + "," + c.srv.URL, c
		}},
		{"a leader outside the group is not followed", func() (string, *coordinator) {
			a.follow(outsider.srv.URL)
			b.leads.Store(true)
			return a.srv.URL + "," + b.srv.URL, b
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, x := range []*coordinator{a, b, c} {
				x.leads.Store(false)
				x.follow("")
			}
			list, want := tt.setup()
			client, base, err := New(list, nil, Options{Wait: -1})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // the second call goes straight to the leader
				before := want.calls.Load()
				status, body := post(t, client, base, "hello")
				if status != http.StatusOK || body != "leader "+want.srv.URL+" got hello at /slackline.v1.SchedulerService/Revive" {
					t.Fatalf("answer %d %q, want the leader %s's", status, body, want.srv.URL)
				}
				if want.calls.Load() != before+1 {
					t.Fatalf("leader called %d times, want once", want.calls.Load()-before)
				}
			}
			if got := client.Transport.(*Transport).Current(); got != want.srv.URL {
				t.Errorf("Current() = %s, want %s", got, want.srv.URL)
			}
		})
	}
}

// TestWaitsForAnElection checks that a call made while no coordinator
// leads waits (with backoff) for one, and that with no wait it gets the
// follower's refusal with the header.
func TestWaitsForAnElection(t *testing.T) {
	a, b := newCoordinator(t), newCoordinator(t)
	list := a.srv.URL + "," + b.srv.URL

	client, base, _ := New(list, nil, Options{Wait: -1})
	status, _ := post(t, client, base, "x")
	if status != http.StatusServiceUnavailable {
		t.Fatalf("no leader, no wait: status %d, want 503", status)
	}

	time.AfterFunc(300*time.Millisecond, func() { b.leads.Store(true) })
	client, base, _ = New(list, nil, Options{Wait: 10 * time.Second})
	start := time.Now()
	status, body := post(t, client, base, "x")
	// The body reaches the leader intact although earlier rounds sent it too.
	if status != http.StatusOK || !strings.HasPrefix(body, "leader "+b.srv.URL+" got x at") {
		t.Fatalf("answer %d %q after an election, want b's with the body", status, body)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond || waited > 3*time.Second {
		t.Errorf("waited %v for a leader elected after 300ms", waited)
	}
}

// TestBodyNotReplayable checks that a request whose body cannot be read
// again is not re-sent: the follower's answer goes to the caller.
func TestBodyNotReplayable(t *testing.T) {
	a, b := newCoordinator(t), newCoordinator(t)
	a.follow(b.srv.URL)
	b.leads.Store(true)
	client, base, _ := New(a.srv.URL+","+b.srv.URL, nil, Options{Wait: -1})
	req, _ := http.NewRequest(http.MethodPost, base+"/x", io.NopCloser(strings.NewReader("stream")))
	req.GetBody = nil
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || b.calls.Load() != 0 {
		t.Fatalf("status %d, leader called %d times; want the follower's 503 and no re-send", resp.StatusCode, b.calls.Load())
	}
	if got := client.Transport.(*Transport).Current(); got != b.srv.URL {
		t.Errorf("Current() = %s, want the named leader for the next call", got)
	}
}

func TestNewSingleURLKeepsClient(t *testing.T) {
	base := &http.Client{Timeout: time.Second}
	client, url, err := New(" http://127.0.0.1:5050/ ", base, Options{})
	if err != nil || client != base || url != "http://127.0.0.1:5050" {
		t.Fatalf("New(one URL) = %p %q %v, want the base client and the URL", client, url, err)
	}
	for _, bad := range []string{"", ",", "127.0.0.1:5050", "ftp://x", "http://a,unix:///s"} {
		if _, _, err := New(bad, nil, Options{}); err == nil {
			t.Errorf("New(%q) accepted", bad)
		}
	}
}
