package nettest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Sink accepts connections and discards what they send, counting bytes.
type Sink struct {
	ln    net.Listener
	bytes atomic.Uint64
}

// ServeSink starts a sink on ln; closing ln stops it.
func ServeSink(ln net.Listener) *Sink {
	s := &Sink{ln: ln}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				buf := make([]byte, 256<<10)
				for {
					n, err := conn.Read(buf)
					s.bytes.Add(uint64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

// Bytes returns what the sink received so far.
func (s *Sink) Bytes() uint64 { return s.bytes.Load() }

// Send writes to addr as fast as TCP allows until ctx ends, with the
// congestion control cc ("" for the system's default), and returns the
// bytes written. The socket is created in the calling thread's network
// namespace (see InNetns).
func Send(ctx context.Context, addr, cc string) (uint64, error) {
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		if cc == "" {
			return nil
		}
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptString(int(fd), syscall.IPPROTO_TCP, syscall.TCP_CONGESTION, cc)
		})
		return errors.Join(err, serr)
	}}
	conn, err := d.DialContext(ctx, "tcp4", addr)
	if err != nil {
		return 0, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	buf := make([]byte, 256<<10)
	var total uint64
	for ctx.Err() == nil {
		n, err := conn.Write(buf)
		total += uint64(n)
		if err != nil {
			break
		}
	}
	return total, nil
}

// Request/response protocol: the client sends a header (request size,
// response size: two big-endian uint32) and the request's bytes; the
// server answers with the response's bytes.

// ServeEcho starts a request/response server on ln; closing ln stops it.
func ServeEcho(ln net.Listener) {
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReaderSize(conn, 256<<10)
				var hdr [8]byte
				resp := make([]byte, 0)
				for {
					if _, err := io.ReadFull(r, hdr[:]); err != nil {
						return
					}
					reqSize, respSize := binary.BigEndian.Uint32(hdr[:4]), binary.BigEndian.Uint32(hdr[4:])
					if _, err := io.CopyN(io.Discard, r, int64(reqSize)); err != nil {
						return
					}
					if int(respSize) > len(resp) {
						resp = make([]byte, respSize)
					}
					if _, err := conn.Write(resp[:respSize]); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// RR configures RequestResponse.
type RR struct {
	// Addr is the server's address.
	Addr string
	// Rate is the requests per second (open loop: each request's latency
	// counts from when it was due, so queueing is not hidden).
	Rate float64
	// Conns is the number of connections requests are spread over.
	Conns int
	// RequestBytes and ResponseBytes size each exchange.
	RequestBytes, ResponseBytes int
}

// RequestResponse runs the open-loop client until ctx ends and returns
// every request's latency, in the order they completed.
func RequestResponse(ctx context.Context, rr RR) ([]time.Duration, error) {
	var mu sync.Mutex
	var latencies []time.Duration
	err := RequestResponseEach(ctx, rr, func(_ time.Time, d time.Duration) {
		mu.Lock()
		latencies = append(latencies, d)
		mu.Unlock()
	})
	return latencies, err
}

// RequestResponseEach runs the open-loop client until ctx ends, calling
// done (from several goroutines) with each exchange's due time and
// latency. It returns the first error of a connection, nil when ctx ended.
func RequestResponseEach(ctx context.Context, rr RR, done func(due time.Time, latency time.Duration)) error {
	if rr.Conns <= 0 {
		rr.Conns = 1
	}
	conns := make([]net.Conn, rr.Conns)
	for i := range conns {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp4", rr.Addr)
		if err != nil {
			return err
		}
		defer c.Close()
		conns[i] = c
	}
	var mu sync.Mutex
	var firstErr error
	interval := time.Duration(float64(time.Second) * float64(rr.Conns) / rr.Rate)
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
			defer stop()
			req := make([]byte, 8+rr.RequestBytes)
			binary.BigEndian.PutUint32(req[:4], uint32(rr.RequestBytes))
			binary.BigEndian.PutUint32(req[4:8], uint32(rr.ResponseBytes))
			resp := make([]byte, rr.ResponseBytes)
			// Connections take turns: connection i sends at i/Conns of each
			// interval.
			due := start.Add(interval * time.Duration(i) / time.Duration(rr.Conns))
			for ctx.Err() == nil {
				if wait := time.Until(due); wait > 0 {
					t := time.NewTimer(wait)
					select {
					case <-ctx.Done():
						t.Stop()
						return
					case <-t.C:
					}
				}
				if _, err := c.Write(req); err != nil {
					mu.Lock()
					if firstErr == nil && ctx.Err() == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				if _, err := io.ReadFull(c, resp); err != nil {
					mu.Lock()
					if firstErr == nil && ctx.Err() == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				done(due, time.Since(due))
				due = due.Add(interval)
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// Quantile returns the q-quantile (0..1, nearest rank) of ds without
// modifying it; 0 for none.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// FormatLatencies prints latencies as microseconds on one line, for a
// helper's output.
func FormatLatencies(ds []time.Duration) string {
	b := make([]byte, 0, 8*len(ds))
	for i, d := range ds {
		if i > 0 {
			b = append(b, ' ')
		}
		b = fmt.Appendf(b, "%d", d.Microseconds())
	}
	return string(b)
}
