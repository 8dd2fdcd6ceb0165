package leaderclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/slackline/slackline/internal/backoff"
	"github.com/slackline/slackline/internal/protocol"
)

// DefaultWait is how long a call waits for a leader to be reachable
// before it gives up with the last answer: long enough to cover an
// election after a leader died (the lease TTL and a recovery).
const DefaultWait = 20 * time.Second

// Split parses a comma-separated list of coordinator URLs (http:// or
// https://, spaces allowed around the commas).
func Split(list string) ([]string, error) {
	var out []string
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimSuffix(strings.TrimSpace(raw), "/")
		if raw == "" {
			continue
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("coordinator %q is not an http:// or https:// URL", raw)
		}
		out = append(out, raw)
	}
	if len(out) == 0 {
		return nil, errors.New("no coordinator URL")
	}
	return out, nil
}

// Options tune a leader-following client.
type Options struct {
	// Wait bounds how long one call keeps looking for a leader while no
	// coordinator is reachable or none leads (DefaultWait; negative: one
	// round over the URLs, no waiting).
	Wait time.Duration
}

// New returns an HTTP client for the coordinators in list and the base URL
// to build Connect clients with. With one URL it returns base (or a
// default client) unchanged; with several the client's transport follows
// the leader (see Transport). base's transport carries every request; its
// other settings (timeout, jar) are kept.
func New(list string, base *http.Client, opts Options) (*http.Client, string, error) {
	urls, err := Split(list)
	if err != nil {
		return nil, "", err
	}
	if base == nil {
		base = &http.Client{}
	}
	if len(urls) == 1 {
		return base, urls[0], nil
	}
	t, err := NewTransport(urls, base.Transport, opts)
	if err != nil {
		return nil, "", err
	}
	client := *base
	client.Transport = t
	return &client, urls[0], nil
}

// Transport is an http.RoundTripper that sends each request to the leader
// of a group of coordinators. It keeps the URL that answered last as
// leader; requests are written for the first URL and rewritten for that
// one. It moves on:
//
//   - to the URL a follower names in protocol.LeaderHeader (if it is one of
//     the group's), retrying there at once: a follower did nothing;
//   - to the next URL when a follower knows no leader, or when a request
//     fails. A request that could not be delivered (a refused connection)
//     is retried there at once; one that may have been delivered (a reset,
//     a timeout) is not: its error goes to the caller, whose next call
//     tries the next URL.
//
// When a round over every URL found no leader, it waits with backoff
// (internal/backoff) and starts again, for up to Options.Wait, then gives
// the caller the last answer (a follower's Unavailable) or error. Only
// requests whose body can be read again (GetBody: unary and server-stream
// calls) are retried. Safe for concurrent use.
type Transport struct {
	base http.RoundTripper
	urls []*url.URL
	wait time.Duration

	mu      sync.Mutex
	current int
}

// NewTransport returns a Transport over urls (at least one) on base
// (http.DefaultTransport when nil).
func NewTransport(urls []string, base http.RoundTripper, opts Options) (*Transport, error) {
	if len(urls) == 0 {
		return nil, errors.New("no coordinator URL")
	}
	if base == nil {
		base = http.DefaultTransport
	}
	if opts.Wait == 0 {
		opts.Wait = DefaultWait
	}
	t := &Transport{base: base, wait: max(opts.Wait, 0)}
	for _, raw := range urls {
		u, err := url.Parse(strings.TrimSuffix(raw, "/"))
		if err != nil {
			return nil, fmt.Errorf("coordinator %q: %w", raw, err)
		}
		t.urls = append(t.urls, u)
	}
	return t, nil
}

// Current returns the URL requests go to now: the leader as last seen.
func (t *Transport) Current() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.urls[t.current].String()
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	deadline := time.Now().Add(t.wait)
	retry := backoff.Backoff{Min: 50 * time.Millisecond, Max: time.Second}
	sent := false // whether req.Body was consumed: later attempts need GetBody
	for {
		resp, err, again := t.round(req, &sent)
		if !again || !time.Now().Before(deadline) {
			return resp, err
		}
		if resp != nil {
			drain(resp)
		}
		if !backoff.Sleep(req.Context(), min(retry.Next(), time.Until(deadline))) {
			return nil, req.Context().Err()
		}
	}
}

// round tries the current URL and follows the group for at most one
// attempt per URL plus one; again says the caller may start another round
// (nothing was delivered to a leader and the request can be sent again).
func (t *Transport) round(req *http.Request, sent *bool) (resp *http.Response, err error, again bool) {
	target := t.pick()
	for attempt := 0; ; attempt++ {
		out, ok := t.prepare(req, target, *sent)
		if !ok {
			return resp, err, false
		}
		*sent = true
		if resp != nil {
			drain(resp)
		}
		resp, err = t.base.RoundTrip(out)
		if err != nil {
			if req.Context().Err() != nil {
				return nil, err, false
			}
			next := t.moveOn(target, -1)
			if !undelivered(err) {
				return nil, err, false
			}
			if attempt >= len(t.urls) {
				return nil, err, true
			}
			target = next
			continue
		}
		leader, follower := resp.Header[http.CanonicalHeaderKey(protocol.LeaderHeader)]
		if !follower {
			return resp, nil, false
		}
		named := -1
		if len(leader) > 0 {
			named = t.index(leader[0])
		}
		next := t.moveOn(target, named)
		if attempt >= len(t.urls) {
			return resp, nil, true
		}
		target = next
	}
}

// pick returns the index of the current URL.
func (t *Transport) pick() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.current
}

// moveOn makes named the current URL if it is one (and not from), else
// the one after from, unless another call moved on already; it returns
// the new current.
func (t *Transport) moveOn(from, named int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.current == from {
		if named >= 0 && named != from {
			t.current = named
		} else {
			t.current = (from + 1) % len(t.urls)
		}
	}
	return t.current
}

// index returns the position of a URL in the group, or -1.
func (t *Transport) index(raw string) int {
	u, err := url.Parse(strings.TrimSuffix(raw, "/"))
	if err != nil {
		return -1
	}
	for i, v := range t.urls {
		if v.Scheme == u.Scheme && v.Host == u.Host {
			return i
		}
	}
	return -1
}

// prepare returns req aimed at URL i; a retry needs a fresh body.
func (t *Transport) prepare(req *http.Request, i int, retry bool) (*http.Request, bool) {
	out := req.Clone(req.Context())
	if retry && req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, false
		}
		body, err := req.GetBody()
		if err != nil {
			return nil, false
		}
		out.Body = body
	}
	target, first := t.urls[i], t.urls[0]
	out.URL.Scheme, out.URL.Host, out.Host = target.Scheme, target.Host, ""
	if target.Path != first.Path {
		out.URL.Path = target.Path + strings.TrimPrefix(req.URL.Path, first.Path)
		out.URL.RawPath = ""
	}
	return out, true
}

// undelivered reports whether err means the request never reached a
// server, so that sending it elsewhere cannot do anything twice.
func undelivered(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}
