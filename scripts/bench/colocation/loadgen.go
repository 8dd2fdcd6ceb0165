package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// loadReport is what the load generator writes on its stdout when it is
// done: each request's latency in microseconds from its scheduled send time
// (-1: failed, notSent: in a pause), in schedule order.
type loadReport struct {
	LatencyMicros []int64 `json:"latency_us"`
}

// notSent marks a request of a pause (--pause-every): it was not sent.
const notSent = -2

// paused says whether a request scheduled at (from the start) falls in a
// pause: slice at/slice is one when its number modulo every is pauseAt
// (every 0: never).
func paused(at, slice time.Duration, every, pauseAt int) bool {
	return every > 0 && slice > 0 && int(at/slice)%every == pauseAt
}

// runLoadgen is the "loadgen" sub-command: the benchmark starts it as a
// process of its own, moves it into the load generator's cgroup, then
// writes a line on its stdin; only then does it send --rate requests per
// second for --duration, open loop (a request is sent at its scheduled time
// whether or not earlier ones have answered, so queueing is not hidden),
// except in pauses: with --pause-every K, the --pause-slice long slices whose
// number modulo K is --pause-at send nothing, or with --pause-query Q send
// their requests with the query Q (the io scenario: "nofsync", the server
// doing its CPU work without its disk I/O while the writers are measured
// alone on the disk).
func runLoadgen(args []string) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	url := fs.String("url", "", "server URL")
	rate := fs.Int("rate", 400, "requests per second")
	duration := fs.Duration("duration", 30*time.Second, "how long to send")
	pauseSlice := fs.Duration("pause-slice", 0, "slice length of the pause pattern")
	pauseEvery := fs.Int("pause-every", 0, "pause in one slice out of this many (0: never)")
	pauseAt := fs.Int("pause-at", 0, "the paused slice's number modulo --pause-every")
	pauseQuery := fs.String("pause-query", "", "in a pause, send the requests with this query instead of not sending them")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("wait for the start line: %w", err)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	n := int(float64(*rate) * duration.Seconds())
	interval := time.Second / time.Duration(*rate)
	lat := make([]int64, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		target := *url
		if paused(time.Duration(i)*interval, *pauseSlice, *pauseEvery, *pauseAt) {
			if *pauseQuery == "" {
				lat[i] = notSent
				continue
			}
			target += "?" + *pauseQuery
		}
		at := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(at))
		wg.Go(func() {
			lat[i] = -1
			resp, err := client.Get(target)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				lat[i] = time.Since(at).Microseconds()
			}
		})
	}
	wg.Wait()
	return json.NewEncoder(os.Stdout).Encode(loadReport{LatencyMicros: lat})
}
