package cliconfig

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/slackline/slackline/resources"
)

// settings are the flags of a small daemon, as the tests declare them.
type settings struct {
	Listen    string
	Interval  time.Duration
	EBPF      bool
	Count     int64
	Ratio     float64
	QoS       string
	Protect   []string
	Resources resources.Resources
}

// resourcesValue is a flag.Value of its own type, a flag.Getter.
type resourcesValue struct{ r *resources.Resources }

func (v resourcesValue) String() string {
	if v.r == nil {
		return ""
	}
	return v.r.String()
}
func (v resourcesValue) Get() any { return *v.r }
func (v resourcesValue) Set(s string) error {
	r, err := resources.Parse(s)
	if err != nil {
		return err
	}
	*v.r = r
	return nil
}

// repeatable is a repeatable flag (not a flag.Getter).
type repeatable struct{ l *[]string }

func (r repeatable) String() string {
	if r.l == nil {
		return ""
	}
	return strings.Join(*r.l, ",")
}
func (r repeatable) Set(s string) error { *r.l = append(*r.l, s); return nil }

func newFlags(s *settings) *flag.FlagSet {
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&s.Listen, "listen", "127.0.0.1:5051", "")
	fs.DurationVar(&s.Interval, "monitor-interval", 100*time.Millisecond, "")
	fs.BoolVar(&s.EBPF, "ebpf", true, "")
	fs.Int64Var(&s.Count, "task-pids-max", 4096, "")
	fs.Float64Var(&s.Ratio, "gc-disk-watermark", 0.9, "")
	fs.StringVar(&s.QoS, "qos-controller", "cpuset,interference,memory", "")
	fs.Var(repeatable{&s.Protect}, "protect-cgroup", "")
	fs.Var(resourcesValue{&s.Resources}, "fixed-revocable", "")
	return fs
}

func defaults() settings {
	var s settings
	newFlags(&s)
	return s
}

func TestApply(t *testing.T) {
	t.Parallel()
	cmpOpts := cmp.Comparer(func(a, b resources.Resources) bool { return a.String() == b.String() })
	for _, tc := range []struct {
		name    string
		args    []string // command line
		file    string
		want    func(*settings)
		wantErr []string // substrings of the error; none: no error
	}{
		{name: "empty file", file: "", want: func(*settings) {}},
		{name: "comments only", file: "# nothing\n", want: func(*settings) {}},
		{
			name: "scalars of every type",
			file: "listen: 0.0.0.0:6000\nmonitor-interval: 250ms\nebpf: false\ntask-pids-max: 64\ngc-disk-watermark: 0.5\nfixed-revocable: cpus:2;mem:512\n",
			want: func(s *settings) {
				s.Listen, s.Interval, s.EBPF, s.Count, s.Ratio = "0.0.0.0:6000", 250*time.Millisecond, false, 64, 0.5
				s.Resources = resources.MustParse("cpus:2;mem:512")
			},
		},
		{
			name: "quoted strings keep their text",
			file: "listen: \"[::1]:5051\"\nqos-controller: 'noop'\n",
			want: func(s *settings) { s.Listen, s.QoS = "[::1]:5051", "noop" },
		},
		{
			name: "a list for a single-valued flag is one comma-separated value",
			file: "qos-controller: [cpuset, interference]\n",
			want: func(s *settings) { s.QoS = "cpuset,interference" },
		},
		{
			name: "a list for a repeatable flag sets each item",
			file: "protect-cgroup:\n  - system.slice/etcd.service\n  - system.slice/nginx.service\n",
			want: func(s *settings) { s.Protect = []string{"system.slice/etcd.service", "system.slice/nginx.service"} },
		},
		{
			name: "a scalar for a repeatable flag is one item",
			file: "protect-cgroup: a.slice\n",
			want: func(s *settings) { s.Protect = []string{"a.slice"} },
		},
		{
			name: "the command line overrides the file",
			args: []string{"--listen", "127.0.0.1:7000", "--protect-cgroup", "cli.slice", "--ebpf=true"},
			file: "listen: 0.0.0.0:6000\nprotect-cgroup: [file.slice]\nebpf: false\nmonitor-interval: 1s\n",
			want: func(s *settings) {
				s.Listen, s.Protect, s.Interval = "127.0.0.1:7000", []string{"cli.slice"}, time.Second
			},
		},
		{
			name:    "unknown key, with the closest flag name",
			file:    "listen: 0.0.0.0:6000\nmonitor-intervall: 1s\n",
			wantErr: []string{"cfg.yaml:2: monitor-intervall: unknown setting", "did you mean monitor-interval?"},
		},
		{
			name:    "unknown key without a close name",
			file:    "frobnicate: 1\n",
			wantErr: []string{"cfg.yaml:1: frobnicate: unknown setting (no such flag)"},
		},
		{
			name:    "unknown key given with dashes",
			file:    "--listen: x\n",
			wantErr: []string{"--listen: unknown setting", "did you mean listen?"},
		},
		{
			name:    "wrong type: a duration without unit",
			file:    "monitor-interval: 100\n",
			wantErr: []string{"cfg.yaml:1: monitor-interval: invalid value \"100\"", "want a duration such as 250ms"},
		},
		{
			name:    "wrong type: yes is no bool",
			file:    "ebpf: yes\n",
			wantErr: []string{"ebpf: invalid value \"yes\": want true or false"},
		},
		{
			name:    "wrong type: resources",
			file:    "fixed-revocable: cpus:lots\n",
			wantErr: []string{"fixed-revocable: invalid value \"cpus:lots\""},
		},
		{
			name:    "every error is reported",
			file:    "ebpf: maybe\ntask-pids-max: many\n",
			wantErr: []string{"cfg.yaml:1: ebpf", "cfg.yaml:2: task-pids-max"},
		},
		{
			name:    "a mapping value",
			file:    "listen:\n  host: x\n",
			wantErr: []string{"listen: want a value or a list of values, not a mapping"},
		},
		{
			name:    "a null value",
			file:    "listen:\n",
			wantErr: []string{"listen: no value"},
		},
		{
			name:    "a key twice",
			file:    "listen: a:1\nlisten: b:2\n",
			wantErr: []string{"cfg.yaml:2: listen: set twice (first on line 1)"},
		},
		{
			name:    "config in a config file",
			file:    "config: other.yaml\n",
			wantErr: []string{"config: not allowed in a config file"},
		},
		{
			name:    "not a mapping",
			file:    "- listen\n",
			wantErr: []string{"want a mapping of flag names to values"},
		},
		{
			name:    "two documents",
			file:    "listen: a:1\n---\nlisten: b:2\n",
			wantErr: []string{"want one YAML document"},
		},
		{
			name: "one document with a start marker",
			file: "---\nlisten: a:1\n",
			want: func(s *settings) { s.Listen = "a:1" },
		},
		{
			name:    "not YAML",
			file:    "listen: [\n",
			wantErr: []string{"--config cfg.yaml"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got settings
			fs := newFlags(&got)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := Apply(fs, "cfg.yaml", []byte(tc.file))
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error, want %q", tc.wantErr)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := defaults()
			tc.want(&want)
			if d := cmp.Diff(want, got, cmpOpts); d != "" {
				t.Errorf("settings (-want +got):\n%s", d)
			}
		})
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(file, []byte("listen: 0.0.0.0:6000\nebpf: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var s settings
	fs := newFlags(&s)
	if done, err := Parse(fs, []string{"--config", file, "--ebpf"}); done || err != nil {
		t.Fatalf("Parse = %v, %v", done, err)
	}
	if s.Listen != "0.0.0.0:6000" || !s.EBPF {
		t.Errorf("listen %q ebpf %v: want the file's listen and the command line's ebpf", s.Listen, s.EBPF)
	}

	var out bytes.Buffer
	if done, err := parse(newFlags(&s), []string{"--version"}, &out); !done || err != nil {
		t.Fatalf("Parse --version = %v, %v; want done", done, err)
	}
	if !strings.HasPrefix(out.String(), "daemon ") {
		t.Errorf("--version printed %q", out.String())
	}
	if done, err := Parse(newFlags(&s), []string{"-h"}); !done || err != nil {
		t.Errorf("Parse -h = %v, %v; want done", done, err)
	}
	if _, err := Parse(newFlags(&s), []string{"--config", filepath.Join(dir, "missing.yaml")}); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, bytes.Repeat([]byte("# padding\n"), MaxFileSize/10+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(newFlags(&s), []string{"--config", big}); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("oversized file: %v", err)
	}
}

func TestApplyPFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		args     []string
		file     string
		wantAddr string
		wantList []string
		wantWait time.Duration
		wantErr  string
	}{
		{name: "file", file: "coordinator: http://c:5050\nlabels: [a, b]\nwait: 2s\n",
			wantAddr: "http://c:5050", wantList: []string{"a", "b"}, wantWait: 2 * time.Second},
		{name: "command line wins", args: []string{"--coordinator=http://x:1", "--labels=z"}, file: "coordinator: http://c:5050\nlabels: [a, b]\n",
			wantAddr: "http://x:1", wantList: []string{"z"}, wantWait: time.Second},
		{name: "unknown", file: "coordinater: x\n", wantErr: "did you mean coordinator?"},
		{name: "wrong type", file: "wait: soon\n", wantErr: "wait: invalid value \"soon\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := pflag.NewFlagSet("sim", pflag.ContinueOnError)
			addr := fs.String("coordinator", "http://127.0.0.1:5050", "")
			list := fs.StringSlice("labels", nil, "")
			wait := fs.Duration("wait", time.Second, "")
			AddPFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := ApplyPFlags(fs, "sim.yaml", []byte(tc.file))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if *addr != tc.wantAddr || !cmp.Equal(*list, tc.wantList) || *wait != tc.wantWait {
				t.Errorf("got %q %q %v, want %q %q %v", *addr, *list, *wait, tc.wantAddr, tc.wantList, tc.wantWait)
			}
		})
	}
}

func TestFormatVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{nil, "slackline-agent (no build information)"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			"slackline-agent (devel) (revision unknown) go1.26.8"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.1"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0094f6f"}, {Key: "vcs.time", Value: "2026-08-01T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"slackline-agent v0.3.1 (revision 0094f6f, 2026-08-01T10:00:00Z, modified) go1.26.8"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.1"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0094f6f"}, {Key: "vcs.modified", Value: "false"}}},
			"slackline-agent v0.3.1 (revision 0094f6f) go1.26.8"},
	} {
		if got := formatVersion("slackline-agent", tc.info); got != tc.want {
			t.Errorf("formatVersion = %q, want %q", got, tc.want)
		}
	}
}

func TestClosest(t *testing.T) {
	t.Parallel()
	names := []string{"listen", "work-dir", "monitor-interval", "config", "ebpf"}
	for key, want := range map[string]string{
		"listn": "listen", "workdir": "work-dir", "work_dir": "work-dir", "ebfp": "ebpf",
		"confg":    "", // reserved names are never suggested
		"zzzzzzzz": "",
	} {
		if got := closest(key, names); got != want {
			t.Errorf("closest(%q) = %q, want %q", key, got, want)
		}
	}
}

// TestSecretFlagsFromEnvironment: a secret's path comes from
// SLACKLINE_<FLAG> when the command line does not give it, and wins over
// the config file; other flags never come from the environment.
func TestSecretFlagsFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("tls-key: /file/key\nauthz: /file/authz.yaml\nlisten: 1.2.3.4:5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLACKLINE_TLS_KEY", "/env/key")
	t.Setenv("SLACKLINE_TLS_CERT", "/env/cert")
	t.Setenv("SLACKLINE_LISTEN", "6.6.6.6:6") // not a secret: ignored
	newSet := func() (*flag.FlagSet, map[string]*string) {
		fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
		v := map[string]*string{}
		for _, name := range []string{"tls-key", "tls-cert", "authz", "listen"} {
			v[name] = fs.String(name, "default", "")
		}
		return fs, v
	}
	fs, v := newSet()
	if done, err := Parse(fs, []string{"--config", file, "--tls-cert", "/cli/cert"}); done || err != nil {
		t.Fatalf("Parse = %v, %v", done, err)
	}
	got := map[string]string{}
	for name, p := range v {
		got[name] = *p
	}
	want := map[string]string{"tls-key": "/env/key", "tls-cert": "/cli/cert", "authz": "/file/authz.yaml", "listen": "1.2.3.4:5"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("flags (-want +got):\n%s", diff)
	}
	if EnvName("agent-client-key") != "SLACKLINE_AGENT_CLIENT_KEY" {
		t.Errorf("EnvName(agent-client-key) = %s", EnvName("agent-client-key"))
	}
}

// TestMisspelledKeysAreRefused: a config file's misspelled key is refused,
// naming the key, the file and the flag meant.
func TestMisspelledKeysAreRefused(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	fs.String("tls-key", "", "")
	fs.String("log-format", "", "")
	err := Apply(fs, "c.yaml", []byte("tls-kye: /x\n"))
	if err == nil || !strings.Contains(err.Error(), "tls-kye") || !strings.Contains(err.Error(), "c.yaml") || !strings.Contains(err.Error(), "tls-key") {
		t.Errorf("misspelled key: %v, want the key, the file and the flag meant", err)
	}
}
