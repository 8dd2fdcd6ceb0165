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
