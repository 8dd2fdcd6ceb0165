// Command auth measures what authentication and authorization cost a unary
// RPC once connections are reused: the same coordinator calls over
// loopback, side by side in one run, in four modes — http1 (cleartext
// HTTP/1.1, what a default client speaks to an http:// URL), plain
// (cleartext HTTP/2, no authorization: the baseline, same protocol as over
// TLS), tls (HTTP/2 over TLS only) and secure (TLS, client certificates,
// bearer tokens and authz.yaml, as `make run` serves). Two
// RPCs: an agent's Heartbeat (the most frequent call of a large cluster;
// mTLS identity and the session's host check) and an operator's GetRoles
// (bearer token, hashed and compared). Modes alternate round by round so
// that a noisy machine hurts them alike; medians over the rounds are
// reported, of the latency (p50 of sequential calls), of the CPU time per
// call (client and server are this process: what a loaded machine does not
// distort) and of the throughput of concurrent callers.
//
//	go run ./scripts/bench/auth [--rounds 7] [--calls 2000] [--concurrency 8]
//
// It ends with one line:
//
//	auth: heartbeat_p50_us plain=P tls=T secure=S overhead=O% heartbeat_cpu_us plain=P tls=T secure=S overhead=O% authz_only=A% throughput_per_s ... getroles_p50_us ...
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/coordinator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "auth:", err)
		os.Exit(1)
	}
}

// mode is one way of serving the same coordinator code.
type mode struct {
	name      string
	agent     slacklinev1connect.AgentServiceClient
	operator  slacklinev1connect.OperatorServiceClient
	heartbeat *slacklinev1.HeartbeatRequest
}

func run() error {
	rounds := flag.Int("rounds", 7, "measurement rounds (modes alternate within each)")
	calls := flag.Int("calls", 2000, "sequential calls per mode and round (latency)")
	concurrency := flag.Int("concurrency", 8, "concurrent callers for the throughput measurement")
	window := flag.Duration("window", time.Second, "throughput measurement window per mode and round")
	flag.Parse()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "bench-auth")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	creds := filepath.Join(dir, "credentials")
	if _, err := auth.Generate(creds, auth.Spec{Hosts: []string{"127.0.0.1"}, Agents: []string{"bench-agent"}, Operators: []string{"admin"}}); err != nil {
		return err
	}
	file := func(name string) string { return filepath.Join(creds, name) }
	authz, err := auth.Load(file(auth.AuthzFile))
	if err != nil {
		return err
	}
	serverTLS, err := auth.ServerTLS(file(auth.CoordinatorCertFile), file(auth.CoordinatorKeyFile), file(auth.CACertFile))
	if err != nil {
		return err
	}

	var modes []*mode
	for _, m := range []struct {
		name   string
		tls    bool
		h2c    bool
		authz  *auth.Authorizer
		agent  auth.ClientCredentials
		client auth.ClientCredentials
	}{
		{name: "http1"},
		{name: "plain", h2c: true},
		{name: "tls", tls: true, agent: auth.ClientCredentials{CAFile: file(auth.CACertFile)}, client: auth.ClientCredentials{CAFile: file(auth.CACertFile)}},
		{name: "secure", tls: true, authz: authz,
			agent:  auth.ClientCredentials{CAFile: file(auth.CACertFile), CertFile: file(auth.AgentCertFile("bench-agent")), KeyFile: file(auth.AgentKeyFile("bench-agent"))},
			client: auth.ClientCredentials{CAFile: file(auth.CACertFile), TokenFile: file(auth.TokenFile("admin"))}},
	} {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		coord, err := coordinator.New(coordinator.Config{WorkDir: filepath.Join(dir, m.name), Logger: quiet, Authz: m.authz,
			AgentHeartbeatInterval: time.Hour, AgentTimeout: time.Hour})
		if err != nil {
			return err
		}
		defer coord.Close()
		go coord.Run(ctx)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		cfg := server.Config{Listener: ln, Logger: quiet}
		url := "http://" + ln.Addr().String()
		if m.tls {
			cfg.TLS, url = serverTLS, "https://"+ln.Addr().String()
		}
		go server.Serve(ctx, cfg, coord.Handler())
		agentHTTP, err := m.agent.HTTPClient()
		if err != nil {
			return err
		}
		clientHTTP, err := m.client.HTTPClient()
		if err != nil {
			return err
		}
		if m.h2c {
			// Cleartext HTTP/2 only: the same protocol as over TLS.
			for _, c := range []*http.Client{agentHTTP, clientHTTP} {
				t := c.Transport.(*http.Transport)
				t.Protocols = new(http.Protocols)
				t.Protocols.SetUnencryptedHTTP2(true)
			}
		}
		md := &mode{name: m.name, agent: slacklinev1connect.NewAgentServiceClient(agentHTTP, url),
			operator: slacklinev1connect.NewOperatorServiceClient(clientHTTP, url)}
		resp, err := md.agent.Register(ctx, connect.NewRequest(&slacklinev1.RegisterRequest{
			ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
			AgentInfo:       &slacklinev1.AgentInfo{Hostname: "bench-agent", Resources: resources.MustParse("cpus:4;mem:4096").Proto("", resources.Regular)},
		}))
		if err != nil {
			return fmt.Errorf("%s: register: %w", m.name, err)
		}
		md.heartbeat = &slacklinev1.HeartbeatRequest{AgentId: resp.Msg.GetAgentId(), SessionId: resp.Msg.GetSessionId()}
		modes = append(modes, md)
	}

	heartbeat := func(m *mode) error {
		_, err := m.agent.Heartbeat(ctx, connect.NewRequest(m.heartbeat))
		return err
	}
	getRoles := func(m *mode) error {
		_, err := m.operator.GetRoles(ctx, connect.NewRequest(&slacklinev1.GetRolesRequest{}))
		return err
	}
	// Warm up: connections open, handshakes done, code paths hot.
	for _, m := range modes {
		for range 200 {
			if err := heartbeat(m); err != nil {
				return fmt.Errorf("%s heartbeat: %w", m.name, err)
			}
			if err := getRoles(m); err != nil {
				return fmt.Errorf("%s GetRoles: %w", m.name, err)
			}
		}
	}
	hbP50, hbCPU := map[string][]float64{}, map[string][]float64{}
	rolesP50 := map[string][]float64{}
	throughput := map[string][]float64{}
	for round := range *rounds {
		for i := range modes {
			m := modes[(i+round)%len(modes)]
			p, cpu, err := p50(*calls, func() error { return heartbeat(m) })
			if err != nil {
				return err
			}
			hbP50[m.name], hbCPU[m.name] = append(hbP50[m.name], p), append(hbCPU[m.name], cpu)
			if p, _, err = p50(*calls, func() error { return getRoles(m) }); err != nil {
				return err
			}
			rolesP50[m.name] = append(rolesP50[m.name], p)
			rate, err := rate(*concurrency, *window, func() error { return heartbeat(m) })
			if err != nil {
				return err
			}
			throughput[m.name] = append(throughput[m.name], rate)
		}
	}
	fmt.Printf("%-7s %16s %22s %16s %20s\n", "mode", "heartbeat p50", "heartbeat CPU/call", "GetRoles p50", "heartbeat calls/s")
	for _, m := range modes {
		fmt.Printf("%-7s %13.1f us %19.1f us %13.1f us %20.0f\n", m.name, median(hbP50[m.name]), median(hbCPU[m.name]),
			median(rolesP50[m.name]), median(throughput[m.name]))
	}
	overhead := func(base, secure float64) float64 { return 100 * (secure - base) / base }
	hbPlain, hbTLS, hbSecure := median(hbP50["plain"]), median(hbP50["tls"]), median(hbP50["secure"])
	tpPlain, tpSecure := median(throughput["plain"]), median(throughput["secure"])
	rPlain, rSecure := median(rolesP50["plain"]), median(rolesP50["secure"])
	cpuPlain, cpuTLS, cpuSecure := median(hbCPU["plain"]), median(hbCPU["tls"]), median(hbCPU["secure"])
	fmt.Printf("http1 (cleartext HTTP/1.1) heartbeat p50 %.1f us, CPU %.1f us per call\n", median(hbP50["http1"]), median(hbCPU["http1"]))
	fmt.Printf("auth: heartbeat_p50_us plain=%.1f tls=%.1f secure=%.1f overhead=%.1f%% heartbeat_cpu_us plain=%.1f tls=%.1f secure=%.1f overhead=%.1f%% authz_only=%.1f%% "+
		"throughput_per_s plain=%.0f secure=%.0f overhead=%.1f%% getroles_p50_us plain=%.1f secure=%.1f overhead=%.1f%%\n",
		hbPlain, hbTLS, hbSecure, overhead(hbPlain, hbSecure), cpuPlain, cpuTLS, cpuSecure, overhead(cpuPlain, cpuSecure), overhead(cpuTLS, cpuSecure),
		tpPlain, tpSecure, -overhead(tpPlain, tpSecure), rPlain, rSecure, overhead(rPlain, rSecure))
	return nil
}

// p50 makes n sequential calls and returns their median latency and the
// process's CPU time per call (client and server both run here), in µs.
// CPU time is what a loaded machine does not distort.
func p50(n int, call func() error) (latency, cpu float64, err error) {
	lat := make([]float64, 0, n)
	before := cpuTime()
	for range n {
		start := time.Now()
		if err := call(); err != nil {
			return 0, 0, err
		}
		lat = append(lat, float64(time.Since(start).Nanoseconds())/1e3)
	}
	return median(lat), float64((cpuTime() - before).Nanoseconds()) / 1e3 / float64(n), nil
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rate runs callers concurrently for window and returns calls per second.
func rate(callers int, window time.Duration, call func() error) (float64, error) {
	var done atomic.Int64
	var firstErr atomic.Value
	stop := time.Now().Add(window)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if err := call(); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(done.Load()) / window.Seconds(), nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
