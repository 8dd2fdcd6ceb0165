package backtest

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/slackline/slackline/resources"
)

// ErrInvalidTrace is wrapped by every error ReadTrace returns for malformed
// input.
var ErrInvalidTrace = errors.New("invalid trace")

// traceMagic is the first line of every trace file; it versions the format.
const traceMagic = "# slackline trace v1"

// Trace is the recorded usage of one container, sampled at a fixed interval.
type Trace struct {
	// Name identifies the trace in reports ("steady", "bursty", ...).
	Name string
	// Command is the workload that was recorded (informational).
	Command string
	// Interval is the sampling interval.
	Interval time.Duration
	// Allocation is what the container is taken to be allocated as a
	// guaranteed task when the trace is replayed (cpus, mem).
	Allocation resources.Resources
	// Points are the samples, oldest first, one per Interval.
	Points []Point
}

// Point is one sample of a trace.
type Point struct {
	// Offset is the end of the sampled interval, from the start of the
	// recording.
	Offset time.Duration
	// CPU is the cores used over the interval ending at Offset.
	CPU float64
	// MemBytes is the memory working set (anonymous plus active file
	// pages; RSS in traces recorded before the recorder measured it) at
	// Offset.
	MemBytes uint64
}

// Duration returns the time the trace covers.
func (t Trace) Duration() time.Duration {
	if len(t.Points) == 0 {
		return 0
	}
	return t.Points[len(t.Points)-1].Offset
}

// WriteTrace writes t in the text form ReadTrace reads: a few "# key: value"
// header lines, a column header and one CSV row per point
// ("offset_s,cpu_cores,mem_bytes").
func WriteTrace(w io.Writer, t Trace) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, traceMagic)
	fmt.Fprintf(bw, "# name: %s\n", t.Name)
	fmt.Fprintf(bw, "# command: %s\n", strings.ReplaceAll(t.Command, "\n", " "))
	fmt.Fprintf(bw, "# interval: %s\n", t.Interval)
	fmt.Fprintf(bw, "# allocation: %s\n", t.Allocation)
	fmt.Fprintln(bw, "offset_s,cpu_cores,mem_bytes")
	for _, p := range t.Points {
		fmt.Fprintf(bw, "%.3f,%.4f,%d\n", p.Offset.Seconds(), p.CPU, p.MemBytes)
	}
	return bw.Flush()
}

// ReadTrace parses the form WriteTrace writes. Points must be in increasing
// offset order with non-negative, finite CPU values.
func ReadTrace(r io.Reader) (Trace, error) {
	var t Trace
	sc := bufio.NewScanner(r)
	line := 0
	sawHeader := false
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if line == 1 {
			if text != traceMagic {
				return Trace{}, fmt.Errorf("%w: first line %q is not %q", ErrInvalidTrace, text, traceMagic)
			}
			continue
		}
		if text == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(text, "#"); ok {
			key, value, _ := strings.Cut(rest, ":")
			value = strings.TrimSpace(value)
			var err error
			switch strings.TrimSpace(key) {
			case "name":
				t.Name = value
			case "command":
				t.Command = value
			case "interval":
				t.Interval, err = time.ParseDuration(value)
			case "allocation":
				t.Allocation, err = resources.Parse(value)
			}
			if err != nil {
				return Trace{}, fmt.Errorf("%w: line %d: %v", ErrInvalidTrace, line, err)
			}
			continue
		}
		if !sawHeader {
			if text != "offset_s,cpu_cores,mem_bytes" {
				return Trace{}, fmt.Errorf("%w: line %d: want the column header, got %q", ErrInvalidTrace, line, text)
			}
			sawHeader = true
			continue
		}
		p, err := parsePoint(text)
		if err != nil {
			return Trace{}, fmt.Errorf("%w: line %d: %v", ErrInvalidTrace, line, err)
		}
		if n := len(t.Points); n > 0 && p.Offset <= t.Points[n-1].Offset {
			return Trace{}, fmt.Errorf("%w: line %d: offset %v does not increase", ErrInvalidTrace, line, p.Offset)
		}
		t.Points = append(t.Points, p)
	}
	if err := sc.Err(); err != nil {
		return Trace{}, fmt.Errorf("read trace: %w", err)
	}
	if t.Interval <= 0 {
		return Trace{}, fmt.Errorf("%w: no positive interval in the header", ErrInvalidTrace)
	}
	if len(t.Points) == 0 {
		return Trace{}, fmt.Errorf("%w: no points", ErrInvalidTrace)
	}
	return t, nil
}

func parsePoint(text string) (Point, error) {
	fields := strings.Split(text, ",")
	if len(fields) != 3 {
		return Point{}, fmt.Errorf("want 3 fields, got %d", len(fields))
	}
	offset, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || !resources.IsFinite(offset) || offset < 0 {
		return Point{}, fmt.Errorf("offset %q", fields[0])
	}
	cpu, err := strconv.ParseFloat(fields[1], 64)
	if err != nil || !resources.IsFinite(cpu) || cpu < 0 {
		return Point{}, fmt.Errorf("cpu %q", fields[1])
	}
	mem, err := strconv.ParseUint(fields[2], 10, 64)
	if err != nil {
		return Point{}, fmt.Errorf("mem %q", fields[2])
	}
	return Point{Offset: time.Duration(offset * float64(time.Second)).Round(time.Millisecond), CPU: cpu, MemBytes: mem}, nil
}

// ReadTraceFile reads the trace in the named file; a name ending in ".gz"
// is gunzipped (the long held-out traces are stored compressed).
func ReadTraceFile(name string) (Trace, error) {
	f, err := os.Open(name)
	if err != nil {
		return Trace{}, fmt.Errorf("open trace: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(name, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return Trace{}, fmt.Errorf("%s: %w: %v", name, ErrInvalidTrace, err)
		}
		defer zr.Close()
		r = zr
	}
	t, err := ReadTrace(r)
	if err != nil {
		return Trace{}, fmt.Errorf("%s: %w", name, err)
	}
	return t, nil
}
