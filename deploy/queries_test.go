package deploy

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slackline/slackline/internal/privileged"
)

var update = flag.Bool("update", false, "rewrite the generated part of docs/operators.md")

// TestQueriesParse: every dashboard and rule expression is valid PromQL
// (the Prometheus parser) and names only Slackline's series, the recording
// rules' outputs, or up. Whether each name exists on a running cluster's
// /metrics is e2e's TestLiveView.
func TestQueriesParse(t *testing.T) {
	dash, err := DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	rules, recorded, err := RuleQueries()
	if err != nil {
		t.Fatal(err)
	}
	if len(dash) < 20 || len(rules) < 8 || len(recorded) < 4 {
		t.Fatalf("found %d dashboard queries, %d rules, %d recording rules: the files were not read", len(dash), len(rules), len(recorded))
	}
	own := map[string]bool{"up": true}
	for _, n := range HAMetrics.Etcd { // etcd's own, where the coordinators keep their registry
		own[n] = true
	}
	for _, r := range recorded {
		own[r] = true
	}
	for _, q := range append(dash, rules...) {
		names, err := MetricNames(q.Expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", q.Where, err, q.Expr)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: names no metric: %s", q.Where, q.Expr)
		}
		for _, n := range names {
			if !own[n] && !strings.HasPrefix(n, "slackline_") && !strings.HasPrefix(n, "container_") {
				t.Errorf("%s: %s is not a Slackline metric", q.Where, n)
			}
		}
	}
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want string
		err  bool
	}{
		{`sum by (le) (rate(x_bucket{instance=~"$instance"}[$__rate_interval])) / on () y`, "x_bucket y", false},
		{`histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m])))`, "a_bucket", false},
		{`rate(x[$instance])`, "", true}, // a variable outside a string is not PromQL
		{`sum(rate(x[5m])`, "", true},
	} {
		names, err := MetricNames(tc.expr)
		if (err != nil) != tc.err || strings.Join(names, " ") != tc.want {
			t.Errorf("MetricNames(%q) = %v, %v; want %q, error %v", tc.expr, names, err, tc.want, tc.err)
		}
	}
}

// TestPromtool runs Prometheus's own checks on the rule files and their
// unit tests (Debian's prometheus package has promtool; CI installs it).
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv(privileged.EnvVar) == "1" {
			t.Fatalf("promtool not found and %s=1 forbids skipping (apt-get install prometheus)", privileged.EnvVar)
		}
		t.Skip("promtool not found (apt-get install prometheus)")
	}
	rules, err := filepath.Glob("prometheus/*.yaml")
	if err != nil || len(rules) == 0 {
		t.Fatalf("no rule files: %v", err)
	}
	tests, err := filepath.Glob("prometheus/tests/*.yaml")
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rule tests: %v", err)
	}
	for _, args := range [][]string{append([]string{"check", "rules"}, rules...), append([]string{"test", "rules"}, tests...)} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestDocsShowAgentPrivileges: docs/operators.md shows PrivilegeTable
// between its markers (go test ./deploy -update rewrites it).
func TestDocsShowAgentPrivileges(t *testing.T) {
	const file = "../docs/operators.md"
	const begin, end = "<!-- agent-privileges:begin (go test ./deploy -update) -->\n", "<!-- agent-privileges:end -->"
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q and %q", file, begin, end)
	}
	want := doc[:i+len(begin)] + PrivilegeTable() + doc[j:]
	if want == doc {
		return
	}
	if *update {
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s does not show deploy.AgentPrivileges: run go test ./deploy -update", file)
}
