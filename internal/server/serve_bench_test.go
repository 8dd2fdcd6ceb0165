package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/slackline/slackline/internal/server"
)

// BenchmarkServeUnary measures one small request and answer over cleartext
// HTTP/2 through Serve with its default timeouts, as an agent's heartbeat
// reaches the coordinator: the server's per-request cost, client included.
func BenchmarkServeUnary(b *testing.B) {
	mux := http.NewServeMux()
	mux.HandleFunc("/beat", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, server.Config{Listener: ln}, mux) }()
	defer func() { cancel(); <-done }()
	transport := &http.Transport{Protocols: new(http.Protocols)}
	transport.Protocols.SetUnencryptedHTTP2(true)
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	url := "http://" + ln.Addr().String() + "/beat"
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		resp, err := client.Post(url, "application/proto", strings.NewReader("agent-id session-id"))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
