package deploy

import (
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// RunbookBase starts every alert's runbook_url: docs/operators.md's
// "Alerts" section has one heading per alert, whose anchor follows.
const RunbookBase = "https://github.com/slackline/slackline/blob/main/docs/operators.md#"

// alerts returns every alerting rule of the rule files.
func alerts(t *testing.T) map[string]map[string]string {
	t.Helper()
	names, err := fs.Glob(files, RulesGlob)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, name := range names {
		raw, err := fs.ReadFile(files, name)
		if err != nil {
			t.Fatal(err)
		}
		var rg RuleGroups
		if err := yaml.Unmarshal(raw, &rg); err != nil {
			t.Fatal(err)
		}
		for _, g := range rg.Groups {
			for _, r := range g.Rules {
				if r.Alert != "" {
					out[r.Alert] = r.Annotations
				}
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("found %d alerts: the rule files were not read", len(out))
	}
	return out
}

// TestEveryAlertHasARunbook: every alert's runbook_url points at a
// heading of docs/operators.md that exists.
func TestEveryAlertHasARunbook(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/operators.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	for name, ann := range alerts(t) {
		url := ann["runbook_url"]
		anchor, ok := strings.CutPrefix(url, RunbookBase)
		switch {
		case !ok:
			t.Errorf("alert %s: runbook_url %q does not start with %s", name, url, RunbookBase)
		case !anchors[anchor]:
			t.Errorf("alert %s: runbook_url %q names no heading of docs/operators.md", name, url)
		case anchor != strings.ToLower(name):
			t.Errorf("alert %s: runbook_url %q, want the alert's own section #%s", name, url, strings.ToLower(name))
		}
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestEveryAlertHasAPromtoolTest: every alert is expected to fire in at
// least one of deploy/prometheus/tests' unit tests (which TestPromtool
// runs).
func TestEveryAlertHasAPromtoolTest(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(files, "prometheus/tests/*.yaml")
	if err != nil || len(names) == 0 {
		t.Fatalf("no rule tests: %v", err)
	}
	fired := map[string]bool{}
	for _, name := range names {
		raw, err := fs.ReadFile(files, name)
		if err != nil {
			t.Fatal(err)
		}
		var file struct {
			Tests []struct {
				AlertRuleTest []struct {
					Alertname string `yaml:"alertname"`
					ExpAlerts []any  `yaml:"exp_alerts"`
				} `yaml:"alert_rule_test"`
			} `yaml:"tests"`
		}
		if err := yaml.Unmarshal(raw, &file); err != nil {
			t.Fatal(err)
		}
		for _, test := range file.Tests {
			for _, a := range test.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					fired[a.Alertname] = true
				}
			}
		}
	}
	for name := range alerts(t) {
		if !fired[name] {
			t.Errorf("alert %s has no promtool test in which it fires", name)
		}
	}
}
