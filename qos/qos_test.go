package qos_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/slackline/slackline/qos"
)

func TestLoad(t *testing.T) {
	cfg := qos.DefaultConfig()
	cfg.Load = qos.LoadConfig{Threshold5Min: 6, Threshold15Min: 4}
	tests := []struct {
		name          string
		load5, load15 float64
		want          string
	}{
		{name: "below both", load5: 6, load15: 4},
		{name: "1-minute load is ignored", load5: 1, load15: 1},
		{name: "5-minute above: every revocable container", load5: 6.5, load15: 1, want: "0s kill batch-1\n0s kill batch-2\n0s kill batch-3\n"},
		{name: "15-minute above", load5: 1, load15: 4.1, want: "0s kill batch-1\n0s kill batch-2\n0s kill batch-3\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := qos.NewSet([]string{"load"}, cfg)
			if err != nil {
				t.Fatal(err)
			}
			in := scene(0, 200*time.Microsecond, 0)
			in.Node.Load1, in.Node.Load5, in.Node.Load15 = 50, tt.load5, tt.load15
			var got []timed
			for _, corr := range c.Evaluate(in) {
				got = append(got, timed{0, corr})
			}
			if diff := cmp.Diff(tt.want, kinds(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			// Asked once: not again while the kills are carried out.
			in.Now = at(time.Second)
			if again := c.Evaluate(in); len(again) != 0 {
				t.Errorf("asked again 1 s later: %v", again)
			}
		})
	}

	t.Run("no threshold", func(t *testing.T) {
		if _, err := qos.NewSet([]string{"load"}, qos.DefaultConfig()); !errors.Is(err, qos.ErrInvalidConfig) {
			t.Errorf("err = %v, want ErrInvalidConfig", err)
		}
	})
}

func TestNoop(t *testing.T) {
	c, err := qos.NewSet([]string{"noop"}, qos.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	in := memScene(0, 1)
	in.Containers[0].RunqP99 = time.Second
	if got := c.Evaluate(in); len(got) != 0 {
		t.Errorf("noop corrected: %v", got)
	}
}

func TestNewSet(t *testing.T) {
	tests := []struct {
		names   string
		wantErr string
	}{
		{names: qos.DefaultControllers},
		{names: " interference , memory ,noop"},
		{names: "", wantErr: "no qos controller named"},
		{names: "interference,cpu", wantErr: `unknown qos controller "cpu": choose among cpuset, diskio, interference, load, memory, network, noop, reclaim`},
		{names: "memory,memory", wantErr: `"memory" named twice`},
	}
	for _, tt := range tests {
		t.Run(tt.names, func(t *testing.T) {
			_, err := qos.NewSet(qos.ParseNames(tt.names), qos.DefaultConfig())
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestDefaultSet runs interference and reclaim together: a node both
// interfered with and critically short of memory gets the throttle and the
// revocable subtree frozen (the kill comes later, if freezing does not
// relieve it).
func TestDefaultSet(t *testing.T) {
	c, err := qos.NewSet(qos.ParseNames(qos.DefaultControllers), qos.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	in := scene(0, 4*ms, 0)
	in.Node.MemAvailable = 100 * mib
	in.Node.MemoryHigh, in.Node.Freeze = true, true
	in.Containers[3].MemBytes = 2 << 30
	got := c.Evaluate(in)
	var b strings.Builder
	for _, corr := range got {
		b.WriteString(corr.Controller + " " + corr.Kind.String() + " " + corr.ContainerID + "\n")
	}
	if want := "interference throttle \nreclaim freeze \n"; b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestMerge(t *testing.T) {
	throttle := func(id string, limit float64, by string) qos.Correction {
		return qos.Correction{Kind: qos.Throttle, ContainerID: id, CPULimit: limit, Controller: by}
	}
	unthrottle := func(id string, limit float64, by string) qos.Correction {
		return qos.Correction{Kind: qos.Unthrottle, ContainerID: id, CPULimit: limit, Controller: by}
	}
	kill := func(id, by string) qos.Correction {
		return qos.Correction{Kind: qos.Kill, ContainerID: id, Controller: by}
	}
	tests := []struct {
		name string
		in   []qos.Correction
		want []qos.Correction
	}{
		{name: "nothing"},
		{
			name: "strictest subtree limit wins",
			in:   []qos.Correction{throttle("", 2, "a"), throttle("", 1, "b"), throttle("", 3, "c")},
			want: []qos.Correction{throttle("", 1, "b")},
		},
		{
			name: "a throttle beats a raise",
			in:   []qos.Correction{unthrottle("", 0.5, "a"), throttle("", 2, "b")},
			want: []qos.Correction{throttle("", 2, "b")},
		},
		{
			name: "of two raises the lower, removal last",
			in:   []qos.Correction{unthrottle("", 0, "a"), unthrottle("", 3, "b")},
			want: []qos.Correction{unthrottle("", 3, "b")},
		},
		{
			name: "a kill supersedes throttles of the same container, not of the subtree",
			in:   []qos.Correction{throttle("batch-1", 1, "a"), kill("batch-1", "b"), throttle("", 1, "a"), throttle("batch-2", 1, "a")},
			want: []qos.Correction{throttle("", 1, "a"), throttle("batch-2", 1, "a"), kill("batch-1", "b")},
		},
		{
			name: "CPU and bandwidth limits of the subtree are merged apart, CPU first",
			in: []qos.Correction{
				{Kind: qos.Throttle, Resource: qos.Bandwidth, BandwidthLimit: 300, Controller: "network"},
				throttle("", 2, "a"),
				{Kind: qos.Throttle, Resource: qos.Bandwidth, BandwidthLimit: 200, Controller: "other"},
				{Kind: qos.Unthrottle, Resource: qos.Bandwidth, BandwidthLimit: 0, Controller: "network"},
			},
			want: []qos.Correction{throttle("", 2, "a"), {Kind: qos.Throttle, Resource: qos.Bandwidth, BandwidthLimit: 200, Controller: "other"}},
		},
		{
			name: "one kill per container, the first controller's",
			in:   []qos.Correction{kill("batch-2", "a"), kill("batch-1", "a"), kill("batch-2", "b")},
			want: []qos.Correction{kill("batch-2", "a"), kill("batch-1", "a")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, qos.Merge(tt.in)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	if err := qos.DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	tests := []struct {
		name string
		edit func(c *qos.Config)
		want string
	}{
		{"enter below exit", func(c *qos.Config) { c.Interference.RunqP99Enter = 100 * time.Microsecond }, "run-queue p99 enter"},
		{"zero exit", func(c *qos.Config) { c.Interference.RunqP99Exit = 0 }, "run-queue p99 exit must be positive"},
		{"psi over 100", func(c *qos.Config) { c.Interference.CPUPressureEnter = 150 }, "cpu pressure enter must be a percentage"},
		{"psi enter below exit", func(c *qos.Config) { c.Interference.CPUPressureExit = 30 }, "cpu pressure enter (25) must not be below exit (30)"},
		{"decrease factor 1", func(c *qos.Config) { c.Interference.DecreaseFactor = 1 }, "decrease factor"},
		{"decrease factor 0", func(c *qos.Config) { c.Interference.DecreaseFactor = 0 }, "decrease factor"},
		{"diskio stall negative", func(c *qos.Config) { c.DiskIO.StallEnter = -time.Millisecond }, "stall enter must not be negative"},
		{"diskio block p99 negative", func(c *qos.Config) { c.DiskIO.BlockP99Enter = -time.Millisecond }, "block p99 enter must not be negative"},
		{"no increase step", func(c *qos.Config) { c.Interference.IncreaseStepCores, c.Interference.IncreaseStepFraction = 0, 0 }, "increase step"},
		{"zero floor", func(c *qos.Config) { c.Interference.FloorCores, c.Interference.FloorFraction = 0, 0 }, "floor must be positive"},
		{"negative events", func(c *qos.Config) { c.Interference.EventCount = -1 }, "event count"},
		{"network plateau without a fraction", func(c *qos.Config) { c.Network.PlateauFraction = 0 }, "network plateau"},
		{"backoff max below backoff", func(c *qos.Config) { c.Interference.ProbeBackoffMax = time.Second }, "probe backoff max"},
		{"zero kill after", func(c *qos.Config) { c.Interference.KillAfter = 0 }, "kill after"},
		{"memory fraction 1", func(c *qos.Config) { c.Memory.MinAvailableFraction = 1 }, "min available fraction"},
		{"memory byte line cap below 1", func(c *qos.Config) { c.Memory.ByteLineCap = 0.5 }, "memory byte line cap must be 0 or at least 1, got 0.5"},
		{"reclaim byte line cap below 1", func(c *qos.Config) { c.Reclaim.ByteLineCap = 0.5 }, "byte line cap must be 0 or at least 1, got 0.5"},
		{"negative load", func(c *qos.Config) { c.Load.Threshold5Min = -1 }, "load thresholds"},
		{"zero kill retry", func(c *qos.Config) { c.KillRetry = 0 }, "kill retry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := qos.DefaultConfig()
			tt.edit(&cfg)
			err := cfg.Validate()
			if !errors.Is(err, qos.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrInvalidConfig mentioning %q", err, tt.want)
			}
			if _, err := qos.NewSet([]string{"noop"}, cfg); err == nil {
				t.Error("NewSet accepted the invalid config")
			}
		})
	}
	t.Run("events disabled need no window", func(t *testing.T) {
		cfg := qos.DefaultConfig()
		cfg.Interference.EventCount, cfg.Interference.EventWindow = 0, 0
		if err := cfg.Validate(); err != nil {
			t.Error(err)
		}
	})
}
