package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/estimator/backtest"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/resources"
)

func TestRunPrintsEveryEstimatorOnEveryScenario(t *testing.T) {
	var out bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetArgs([]string{"run", "-o", "json", "--estimators", "noop,usage,predictive",
		filepath.Join("..", "..", "estimator", "testdata", "*.csv")})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var results []backtest.Result
	if err := json.Unmarshal(out.Bytes(), &results); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	traces, _ := filepath.Glob(filepath.Join("..", "..", "estimator", "testdata", "*.csv"))
	scenarios := len(traces)
	if scenarios > 1 {
		scenarios++ // mix
	}
	if want := 3 * scenarios; len(results) != want {
		t.Fatalf("%d results, want %d (3 estimators × %d scenarios)", len(results), want, scenarios)
	}
	for _, r := range results {
		if r.Estimator == "noop" && r.MeanOffered != 0 {
			t.Errorf("noop offered %v on %s", r.MeanOffered, r.Scenario)
		}
		if r.Samples == 0 || r.MeanIdeal <= 0 {
			t.Errorf("%s/%s: empty replay %+v", r.Scenario, r.Estimator, r)
		}
	}
}

// TestRunReplaysAnchors: the anchors replay beside the estimators, and the
// table has the time-to-offer column.
func TestRunReplaysAnchors(t *testing.T) {
	var out bytes.Buffer
	root := newRootCommand()
	root.SetOut(&out)
	root.SetArgs([]string{"run", "--mix=false", "--estimators", "fast,koordinator,katalyst",
		filepath.Join("..", "..", "estimator", "testdata", "step.csv")})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "TO OFFER") {
		t.Fatalf("want a header with TO OFFER and three rows, got:\n%s", out.String())
	}
	for i, name := range []string{"fast", "koordinator", "katalyst"} {
		if fields := strings.Fields(lines[i+1]); len(fields) != 12 || fields[1] != name {
			t.Errorf("row %d = %q, want 12 columns for %s", i+1, lines[i+1], name)
		}
	}
}

// TestPlotWritesPNG draws the frontier of two short synthetic traces.
func TestPlotWritesPNG(t *testing.T) {
	dir := t.TempDir()
	for i, name := range []string{"flat", "square"} {
		tr := backtest.Trace{Name: name, Interval: 100 * time.Millisecond, Allocation: resources.MustParse("cpus:2")}
		for j := range 400 {
			cpu := 0.5
			if i == 1 && j%100 < 50 {
				cpu = 1.5
			}
			tr.Points = append(tr.Points, backtest.Point{Offset: time.Duration(j+1) * 100 * time.Millisecond, CPU: cpu})
		}
		f, err := os.Create(filepath.Join(dir, name+".csv"))
		if err != nil {
			t.Fatal(err)
		}
		if err := backtest.WriteTrace(f, tr); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	png := filepath.Join(dir, "frontier.png")
	root := newRootCommand()
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"plot", "-o", png, filepath.Join(dir, "*.csv")})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Errorf("%s is not a PNG (%d bytes)", png, len(data))
	}
}

func TestRunRejectsUnknownEstimator(t *testing.T) {
	root := newRootCommand()
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"run", "--estimators", "magic", filepath.Join("..", "..", "estimator", "testdata", "*.csv")})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "magic") {
		t.Errorf("err = %v, want unknown estimator magic", err)
	}
}

// TestRecordRealWorkload records a second of a busy shell loop in a real
// cgroup and checks that the cgroup is gone afterwards.
func TestRecordRealWorkload(t *testing.T) {
	privileged.Require(t)
	cg, err := newUsageCgroup("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	dirs := append([]string(nil), cg.dirs...)
	cmd, err := cg.start("while :; do :; done")
	if err != nil {
		cg.remove()
		t.Fatal(err)
	}
	before, _ := cg.cpuUsage()
	time.Sleep(300 * time.Millisecond) // real work must run; not a timing assertion
	after, _ := cg.cpuUsage()
	if err := cg.remove(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if after <= before {
		t.Errorf("cpu usage of a busy loop did not grow: %v -> %v", before, after)
	}
	for _, dir := range dirs {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("cgroup %s left behind (stat: %v)", dir, err)
		}
	}

	trace, err := record(context.Background(), recordOptions{
		name: "busy", command: "while :; do :; done", duration: time.Second,
		interval: 100 * time.Millisecond, cgroupRoot: "/sys/fs/cgroup",
	}, resources.MustParse("cpus:1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(trace.Points) != 10 || trace.Duration() != time.Second {
		t.Fatalf("trace has %d points over %v, want 10 over 1s", len(trace.Points), trace.Duration())
	}
	total := 0.0
	for _, p := range trace.Points {
		total += p.CPU
	}
	// A busy loop gets a core on a quiet machine but much less beside
	// other work (0.14 was seen in CI with helpers and CPU hogs running), so
	// only what holds under any load is asserted: it was measured running,
	// and never above the one core a single thread can use.
	if mean := total / 10; mean <= 0 || mean > 1.2 {
		t.Errorf("a busy loop used %.2f cores on average, want more than none and at most one", mean)
	}
}
