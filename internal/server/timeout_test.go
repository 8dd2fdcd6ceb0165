package server_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/internal/server"
)

// TestReadTimeout serves with a short read timeout over HTTP/1.1 and
// cleartext HTTP/2: a request whose body stalls is cut, and a response
// streamed for longer than the timeout after the request was read is not.
func TestReadTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	mux := http.NewServeMux()
	bodyErr := make(chan error, 2)
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		bodyErr <- err
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		for i := range 5 {
			if r.Context().Err() != nil {
				return // the server gave up on the request
			}
			io.WriteString(w, strings.Repeat("x", i+1)+"\n")
			http.NewResponseController(w).Flush()
			time.Sleep(timeout / 2)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, server.Config{Listener: ln, ReadTimeout: timeout}, mux) }()
	defer func() { cancel(); <-done }()
	base := "http://" + ln.Addr().String()

	waitCut := func(t *testing.T) {
		t.Helper()
		select {
		case err := <-bodyErr:
			if err == nil {
				t.Fatal("a stalled body was read without error")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a stalled body was not cut by the read timeout")
		}
	}
	stream := func(t *testing.T, client *http.Client) {
		t.Helper()
		resp, err := client.Post(base+"/stream", "text/plain", strings.NewReader("request"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil || strings.Count(string(got), "\n") != 5 {
			t.Fatalf("stream over %s: %q, %v; want 5 lines", resp.Proto, got, err)
		}
	}

	t.Run("HTTP/1.1", func(t *testing.T) {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nonly part")
		waitCut(t)
		stream(t, &http.Client{Transport: &http.Transport{}})
	})
	t.Run("h2c", func(t *testing.T) {
		transport := &http.Transport{Protocols: new(http.Protocols)}
		transport.Protocols.SetUnencryptedHTTP2(true)
		defer transport.CloseIdleConnections()
		client := &http.Client{Transport: transport}
		body, stall := io.Pipe()
		defer stall.Close()
		go func() { io.WriteString(stall, "only part") }()
		req, err := http.NewRequest(http.MethodPost, base+"/upload", body)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		waitCut(t)
		stream(t, client)
	})
}
