package containerizer

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// BenchmarkLaunch measures Launch: from the call until the task has exec'd
// inside its cgroups (supervisor and shim started, checkpoints written). It
// reports the median and the 99th percentile besides the mean.
//
//	sudo go test -run '^$' -bench Launch -benchtime 20x ./agent/containerizer/
func BenchmarkLaunch(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: real cgroups")
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	work := b.TempDir()
	root := "slackline-bench-" + randomSuffix()
	c, err := New(Config{
		CgroupRoot: root, StateDir: filepath.Join(work, "c"), SandboxDir: filepath.Join(work, "s"),
		SupervisorCommand: []string{exe, "supervise"}, KillGracePeriod: 100 * time.Millisecond, Logger: quietLogger(),
		DynamicIDsDir: filepath.Join(work, "uids"),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer removeRealRoot(b, root)
	defer c.Close()
	go func() {
		for range c.Exits() {
		}
	}()
	spec := Spec{Resources: resources.MustParse("cpus:0.1;mem:32"), Command: &slacklinev1.CommandInfo{Value: "sleep", Arguments: []string{"sleep", "1000"}}}
	var took []time.Duration
	var ids []string
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		ct, err := c.Launch(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
		ids = append(ids, ct.ID)
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[(len(took)*99)/100].Microseconds())/1000, "p99-ms")
	for _, id := range ids {
		if err := c.Kill(context.Background(), id); err != nil {
			b.Error(err)
		}
		if err := c.Destroy(id); err != nil {
			b.Error(err)
		}
	}
}

// BenchmarkLaunchIsolation measures Launch with every isolation (PID,
// mount and IPC namespaces, the private tmpfs, the seccomp filter) and with
// none, alternating one launch of each per iteration on two containerizers,
// so both see the same machine; each task is killed and destroyed before
// the next launch, outside the measurement. It reports the median and the
// 99th percentile of each, and the difference at the 99th.
//
//	sudo go test -run '^$' -bench LaunchIsolation -benchtime 200x ./agent/containerizer/
func BenchmarkLaunchIsolation(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: real cgroups")
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	work := b.TempDir()
	newCz := func(name string, iso Isolation) *Containerizer {
		root := "slackline-bench-" + randomSuffix()
		c, err := New(Config{
			CgroupRoot: root, StateDir: filepath.Join(work, name, "c"), SandboxDir: filepath.Join(work, name, "s"),
			SupervisorCommand: []string{exe, "supervise"}, KillGracePeriod: 100 * time.Millisecond, Logger: quietLogger(),
			DynamicIDsDir: filepath.Join(work, "uids"), Isolation: iso,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close(); removeRealRoot(b, root) })
		go func() {
			for range c.Exits() {
			}
		}()
		return c
	}
	arms := []struct {
		name string
		c    *Containerizer
		took []time.Duration
	}{
		{name: "isolated", c: newCz("isolated", DefaultIsolation)},
		{name: "none", c: newCz("none", Isolation{NoNamespaces: true, NoSeccomp: true})},
	}
	spec := Spec{Resources: resources.MustParse("cpus:0.1;mem:32"), Command: &slacklinev1.CommandInfo{Value: "sleep", Arguments: []string{"sleep", "1000"}}}
	b.ResetTimer()
	for i := range b.N {
		for k := range arms {
			a := &arms[(i+k)%len(arms)] // alternate which goes first
			start := time.Now()
			ct, err := a.c.Launch(context.Background(), spec)
			if err != nil {
				b.Fatal(err)
			}
			a.took = append(a.took, time.Since(start))
			if err := a.c.Kill(context.Background(), ct.ID); err != nil {
				b.Fatal(err)
			}
			if err := a.c.Destroy(ct.ID); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	p := func(took []time.Duration, q float64) float64 {
		s := slices.Clone(took)
		slices.Sort(s)
		return float64(s[min(int(float64(len(s))*q), len(s)-1)].Microseconds()) / 1000
	}
	for _, a := range arms {
		b.ReportMetric(p(a.took, 0.5), a.name+"-p50-ms")
		b.ReportMetric(p(a.took, 0.99), a.name+"-p99-ms")
	}
	b.ReportMetric(p(arms[0].took, 0.99)-p(arms[1].took, 0.99), "added-p99-ms")
	b.ReportMetric(p(arms[0].took, 0.5)-p(arms[1].took, 0.5), "added-p50-ms")
}
