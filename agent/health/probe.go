package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// Dialer connects to a port of a task's own address: loopback in its
// network namespace, the host's 127.0.0.1 for a task without one. It is
// the only way probes reach a task: a check names a port and a path,
// never a host.
type Dialer interface {
	DialTask(ctx context.Context, containerID string, port uint16) (net.Conn, error)
}

// ErrPaused is what an Execer's error wraps when the task is paused (its
// container frozen by the QoS freezer): the command did not run, and the
// check says nothing about the task's health.
var ErrPaused = errors.New("task paused")

// Execer runs a command inside a task's container (its namespaces,
// cgroups and user) and returns its exit code and the start of its output;
// a non-nil error means it could not run (wrapping ErrPaused when the task
// is paused).
type Execer interface {
	ExecTask(ctx context.Context, containerID string, cmd *slacklinev1.CommandInfo) (exitCode int, output string, err error)
}

// Probes run the checks: thin shells around a dialer and an execer.
type Probes struct {
	dial   Dialer
	exec   Execer
	paused func(containerID string) bool
	client *http.Client
}

// SetPaused makes every check first ask paused whether the task is paused
// (its container frozen by the QoS freezer); a paused task's check is
// skipped, whatever its type. Call it before the probes are used.
func (p *Probes) SetPaused(paused func(containerID string) bool) { p.paused = paused }

type targetKey struct{}

type target struct {
	containerID string
	port        uint16
}

// NewProbes returns probes that reach tasks through dial and exec.
func NewProbes(dial Dialer, exec Execer) *Probes {
	p := &Probes{dial: dial, exec: exec}
	transport := &http.Transport{
		// Never a proxy, never the URL's host: the connection goes to the
		// task's own port, whatever the request says.
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			t, ok := ctx.Value(targetKey{}).(target)
			if !ok {
				return nil, errors.New("health check without a target")
			}
			return dial.DialTask(ctx, t.containerID, t.port)
		},
		// Self-signed certificates are the rule for a task's own port.
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback to the task only
		DisableKeepAlives:  true,
		DisableCompression: true,
		ForceAttemptHTTP2:  false,
	}
	p.client = &http.Client{
		Transport: transport,
		// A redirect is an answer (3xx is healthy), never followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return p
}

// Probe runs one check of a task within ctx (which carries the check's
// timeout) and returns whether it passed and, if not, why; paused (ok
// false) when the task is paused and the check did not run.
func (p *Probes) Probe(ctx context.Context, containerID string, policy Policy) (ok bool, detail string, paused bool) {
	if p.paused != nil && p.paused(containerID) {
		// A frozen task answers no check (an HTTP check would time out,
		// a TCP one may be accepted by the kernel alone): none runs.
		return false, "task paused (frozen by the QoS freezer)", true
	}
	switch policy.Type {
	case slacklinev1.HealthCheck_TYPE_TCP:
		conn, err := p.dial.DialTask(ctx, containerID, policy.Port)
		if err != nil {
			return false, fmt.Sprintf("TCP port %d: %v", policy.Port, err), false
		}
		conn.Close()
		return true, "", false
	case slacklinev1.HealthCheck_TYPE_HTTP:
		ok, detail := p.http(ctx, containerID, policy)
		return ok, detail, false
	case slacklinev1.HealthCheck_TYPE_COMMAND:
		code, output, err := p.exec.ExecTask(ctx, containerID, policy.Command)
		if errors.Is(err, ErrPaused) {
			return false, fmt.Sprintf("command: %v", err), true
		}
		if err != nil {
			return false, fmt.Sprintf("command: %v", err), false
		}
		if code != 0 {
			detail := fmt.Sprintf("command exited with code %d", code)
			if out := strings.TrimSpace(output); out != "" {
				detail += ": " + lastLine(out)
			}
			return false, detail, false
		}
		return true, "", false
	}
	return false, fmt.Sprintf("unknown check type %v", policy.Type), false
}

// lastLine is the last line of s, at most 200 bytes of it.
func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 200 {
		s = s[len(s)-200:]
	}
	return s
}

func (p *Probes) http(ctx context.Context, containerID string, policy Policy) (bool, string) {
	ctx = context.WithValue(ctx, targetKey{}, target{containerID, policy.Port})
	host := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(policy.Port)))
	url := policy.Scheme + "://" + host + policy.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("User-Agent", "slackline-health-check")
	resp, err := p.client.Do(req)
	if err != nil {
		return false, fmt.Sprintf("GET %s: %v", policy.Path, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return false, fmt.Sprintf("GET %s: HTTP %s", policy.Path, resp.Status)
	}
	return true, ""
}
