package agent

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slackline/slackline/agent/settings"
	"github.com/slackline/slackline/internal/cliconfig"
)

// TestWithSettings: a settings map (YAML or JSON, keyed by flag names)
// sets the estimator and QoS settings of a copy through the flags' own
// parsers, leaves the original alone, reports what changed, and is
// refused, naming the key, for anything but a valid setting.
func TestWithSettings(t *testing.T) {
	t.Parallel()
	base := DefaultOptions()
	base.Insecure = true
	base.Listen = "127.0.0.1:6000" // not a setting: kept
	for _, c := range []struct {
		name, data string
		check      func(t *testing.T, o Options)
		changed    []Setting
		err        []string // substrings of the error
	}{
		{name: "yaml", data: "estimator-target-violation: 0.02\nqos-controller: [interference, reclaim]\nqos-runqueue-p99: 2ms\n",
			check: func(t *testing.T, o Options) {
				if o.EstimatorConfig.Calibration.TargetViolation != 0.02 || strings.Join(o.QoSControllers, ",") != "interference,reclaim" ||
					o.QoS.Interference.RunqP99Enter != 2*time.Millisecond || o.Listen != "127.0.0.1:6000" {
					t.Errorf("applied: %v %v %v %v", o.EstimatorConfig.Calibration.TargetViolation, o.QoSControllers, o.QoS.Interference.RunqP99Enter, o.Listen)
				}
			},
			changed: []Setting{{"estimator-target-violation", "0.02"}, {"qos-controller", "interference,reclaim"}, {"qos-runqueue-p99", "2ms"}}},
		{name: "json", data: `{"estimator": "fast", "estimator-safety-margin": 0.1, "oversubscribe-memory": false}`,
			check: func(t *testing.T, o Options) {
				if o.Estimator != "fast" || o.EstimatorConfig.Fast.Margin != 0.1 || o.EstimatorConfig.Memory {
					t.Errorf("applied: %v %v %v", o.Estimator, o.EstimatorConfig.Fast.Margin, o.EstimatorConfig.Memory)
				}
			},
			changed: []Setting{{"estimator", "fast"}, {"estimator-safety-margin", "0.1"}, {"oversubscribe-memory", "false"}}},
		{name: "same as active", data: "estimator: calibrated\n", changed: nil},
		{name: "empty", data: "", changed: nil},
		{name: "unknown key", data: "estimator-target-violatoin: 0.02\n",
			err: []string{"cand.yaml:1", "estimator-target-violatoin", "did you mean estimator-target-violation"}},
		{name: "not a setting", data: "listen: 0.0.0.0:1\n", err: []string{"cand.yaml:1", "listen", "--listen is not an estimator or QoS setting"}},
		{name: "loop interval", data: "oversubscribed-resources-interval: 1s\n", err: []string{"--oversubscribed-resources-interval is not an estimator or QoS setting"}},
		{name: "protect", data: "protect-cgroup: [a.slice]\n", err: []string{"--protect-cgroup is not"}},
		{name: "no nesting", data: "shadow: x=y\n", err: []string{"--shadow is not"}},
		{name: "bad value", data: "qos-kill-after: soon\n", err: []string{"qos-kill-after", `"soon"`, "duration"}},
		{name: "out of range", data: "estimator-target-violation: 2\n", err: []string{"cand.yaml", "--estimator calibrated"}},
		{name: "unknown estimator", data: "estimator: oracle\n", err: []string{"cand.yaml", "--estimator oracle", "unknown estimator"}},
		{name: "unknown controller", data: "qos-controller: [interference, magic]\n", err: []string{"--qos-controller interference,magic", "magic"}},
		{name: "negative floor", data: "qos-memory-min-available: -1\n", err: []string{"--qos-memory-min-available: must not be negative"}},
		{name: "not a map", data: "- estimator\n", err: []string{"want a mapping"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			o := base
			before := o
			got, changed, err := o.WithSettings("cand.yaml", []byte(c.data))
			if len(c.err) > 0 {
				if err == nil {
					t.Fatalf("no error, want one with %q", c.err)
				}
				for _, want := range c.err {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not say %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.changed, changed); diff != "" {
				t.Errorf("changed (-want +got):\n%s", diff)
			}
			if c.check != nil {
				c.check(t, got)
			}
			if o.Estimator != before.Estimator || o.EstimatorConfig.Calibration != before.EstimatorConfig.Calibration || o.EstimatorConfig.Fast != before.EstimatorConfig.Fast || !slices.Equal(o.QoSControllers, before.QoSControllers) ||
				o.QoS.Interference != before.QoS.Interference {
				t.Error("the original options changed")
			}
		})
	}
}

// TestSettingFlags: every estimator and QoS flag is a setting but the
// loops' intervals and the protected services; no other flag is.
func TestSettingFlags(t *testing.T) {
	t.Parallel()
	names := SettingFlags()
	for _, want := range []string{"estimator", "fixed-revocable", "oversubscribe-memory", "estimator-target-violation",
		"estimator-rise-interval", "qos-controller", "qos-runqueue-p99", "qos-memory-min-available"} {
		if !slices.Contains(names, want) {
			t.Errorf("%s is no setting flag", want)
		}
	}
	for _, not := range []string{"oversubscribed-resources-interval", "qos-correction-interval-min", "protect-cgroup", "shadow", "listen", "ebpf"} {
		if slices.Contains(names, not) {
			t.Errorf("%s is a setting flag", not)
		}
	}
	// The coordinator knows the settings from agent/settings alone: a
	// setting flag declared by Options.AddFlags instead would be refused
	// in every profile.
	if declared := settings.Flags(); !slices.Equal(names, declared) {
		t.Errorf("setting flags %v, agent/settings declares %v: declare estimator and QoS settings in settings.Settings.AddFlags", names, declared)
	}
}

// TestShadowFlag: --shadow NAME=FILE reads FILE, is repeatable, and
// Validate refuses more than two candidates, bad or repeated names and a
// file with a bad key, naming the shadow, the file and the key.
func TestShadowFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := write("good.yaml", "estimator-target-violation: 0.02\n")
	bad := write("bad.yaml", "estimator-target-violation: 0.02\nqos-kill-afterr: 1s\n")
	parse := func(args ...string) (Options, error) {
		var o Options
		fs := flag.NewFlagSet("agent", flag.ContinueOnError)
		o.AddFlags(fs)
		o.Insecure = true
		if err := fs.Parse(args); err != nil {
			return o, err
		}
		return o, o.Validate()
	}
	o, err := parse("--shadow", "a="+good, "--shadow", "b="+good)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Shadows) != 2 || o.Shadows[1].Name != "b" || string(o.Shadows[1].Data) != "estimator-target-violation: 0.02\n" {
		t.Fatalf("shadows %+v", o.Shadows)
	}
	shadows, err := o.NewShadows()
	if err != nil || len(shadows) != 2 || shadows[0].Name() != "a" || !shadows[0].HasEstimator() || !shadows[0].HasQoS() {
		t.Fatalf("NewShadows: %v, %v", shadows, err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--shadow", "a=" + good, "--shadow", "b=" + good, "--shadow", "c=" + good}, []string{"--shadow: 3 candidates, at most 2"}},
		{[]string{"--shadow", "a=" + good, "--shadow", "a=" + good}, []string{"--shadow a=" + good, "name given twice"}},
		{[]string{"--shadow", "active=" + good}, []string{"reserved"}},
		{[]string{"--shadow", "Big=" + good}, []string{"lower-case"}},
		{[]string{"--shadow", "b=" + bad}, []string{"--shadow b=" + bad, "bad.yaml:2", "qos-kill-afterr", "did you mean qos-kill-after"}},
		{[]string{"--shadow", good}, []string{"want NAME=FILE"}},
		{[]string{"--shadow", "a=" + filepath.Join(dir, "missing.yaml")}, []string{"missing.yaml"}},
	} {
		_, err := parse(c.args...)
		for _, want := range c.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%q: error %v, want one saying %q", c.args, err, want)
			}
		}
	}
}

// TestShadowInConfigFile: --config files list shadows as any repeatable
// flag.
func TestShadowInConfigFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cand := filepath.Join(dir, "cand.yaml")
	if err := os.WriteFile(cand, []byte("estimator: fast\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var o Options
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	o.AddFlags(fs)
	if err := cliconfig.Apply(fs, "agent.yaml", []byte("shadow: [fast="+cand+"]\n")); err != nil {
		t.Fatal(err)
	}
	if len(o.Shadows) != 1 || o.Shadows[0].Name != "fast" {
		t.Fatalf("shadows %+v", o.Shadows)
	}
}
