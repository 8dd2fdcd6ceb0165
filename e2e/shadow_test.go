package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/privileged"
)

// TestShadowReports (#29 part 4): a real agent started with two shadow
// settings scores them beside its active settings on the samples of a
// running guaranteed task; GetShadows and /metrics report them, the
// shadows' estimates differ from the active one (one holds all slack
// back), and the revocable estimate the agent publishes is the active
// setting's, never a shadow's.
func TestShadowReports(t *testing.T) {
	privileged.Require(t)
	dir := t.TempDir()
	files := map[string]string{
		"loose":   "estimator-target-violation: 0.05\nqos-runqueue-p99: 2ms\n",
		"nothing": `{"estimator": "noop", "qos-controller": "noop"}`,
	}
	var shadowArgs []string
	for _, name := range []string{"loose", "nothing"} {
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(files[name]), 0o600); err != nil {
			t.Fatal(err)
		}
		shadowArgs = append(shadowArgs, "--shadow", name+"="+path)
	}
	addr, _, _ := startCoordinator(t)
	agent := startAgent(t, addr, "shadow", "cpus:2;mem:2048", shadowArgs...)
	waitAgentsActive(t, addr, 1)
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "guaranteed", "--tasks", "1",
		"--task-resources", "cpus:1;mem:64", "--command", "sleep 3600")

	var resp *slacklinev1.GetShadowsResponse
	eventually(t, 60*time.Second, func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := agent.node().GetShadows(ctx, connect.NewRequest(&slacklinev1.GetShadowsRequest{}))
		if err != nil {
			return err.Error()
		}
		resp = r.Msg
		if len(resp.GetShadows()) != 2 {
			return fmt.Sprintf("%d shadows reported, want 2", len(resp.GetShadows()))
		}
		if resp.GetActive().GetSamples() < 50 || resp.GetActive().GetLatestCpus() < 0.5 {
			return fmt.Sprintf("active settings: %d samples scored, latest %.2f cpus; want 50 samples and the idle task's slack",
				resp.GetActive().GetSamples(), resp.GetActive().GetLatestCpus())
		}
		return ""
	})
	loose, nothing := resp.GetShadows()[0], resp.GetShadows()[1]
	if loose.GetName() != "loose" || loose.GetEstimator() != "calibrated" || nothing.GetEstimator() != "noop" ||
		strings.Join(nothing.GetQosControllers(), ",") != "noop" {
		t.Errorf("shadows %v / %v", loose, nothing)
	}
	if nothing.GetSamples() == 0 || nothing.GetLatestCpus() != 0 || nothing.GetHarvest() != 0 || nothing.GetMeanIdealCpus() < 0.5 {
		t.Errorf("the noop shadow: %d samples, latest %.2f, harvest %.2f of %.2f; want samples, nothing offered of the idle task's slack",
			nothing.GetSamples(), nothing.GetLatestCpus(), nothing.GetHarvest(), nothing.GetMeanIdealCpus())
	}
	// What the agent publishes is the active estimator's: the noop shadow
	// would publish 0.
	if e := estimate(t, agent); e < 0.5 {
		t.Errorf("published estimate %.2f cpus: a shadow changed what is offered", e)
	}

	metrics, err := http.Get("http://" + agent.listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer metrics.Body.Close()
	body, _ := io.ReadAll(metrics.Body)
	for _, want := range []string{`slackline_agent_shadow_estimate_cpus{shadow="nothing"} 0`, `slackline_agent_shadow_samples_scored_total{shadow="loose"}`,
		`slackline_agent_shadow_corrections_total{kind="kill",shadow="active"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}
