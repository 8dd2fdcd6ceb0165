package deploy

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

//go:embed kubernetes/*.yaml kubernetes-ha/*.yaml prometheus/*.yaml prometheus/tests/*.yaml grafana/*.json
var files embed.FS

// Files returns the operator artifacts, rooted at deploy/.
func Files() fs.FS { return files }

// DashboardFile and RulesGlob locate the dashboard and the rule files in Files.
const (
	DashboardFile = "grafana/slackline.json"
	RulesGlob     = "prometheus/*.yaml"
)

// Query is one PromQL expression of the dashboard or the rules.
type Query struct {
	// Where names it: a panel's title and ref id, a variable, or a rule.
	Where string
	// Expr is the expression as written (Grafana variables included).
	Expr string
}

// DashboardQueries returns every PromQL expression of the dashboard: the
// panels' targets (collapsed rows included) and the variables' queries
// (label_values(EXPR, label) yields EXPR).
func DashboardQueries() ([]Query, error) {
	raw, err := fs.ReadFile(files, DashboardFile)
	if err != nil {
		return nil, err
	}
	var dash struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		return nil, fmt.Errorf("%s: %w", DashboardFile, err)
	}
	var out []Query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, Query{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		if m := labelValues.FindStringSubmatch(q); m != nil {
			q = m[1]
		}
		out = append(out, Query{Where: fmt.Sprintf("variable %q", v.Name), Expr: q})
	}
	return out, nil
}

type panel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)

// RuleGroups is the shape of a Prometheus rule file.
type RuleGroups struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Record      string            `yaml:"record"`
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// HAMetrics are the metric families the rules name that only a group of
// coordinators on etcd exports (Coordinator) and etcd itself (Etcd): a
// lone coordinator on bbolt has neither, so tests that check names against
// it leave these out, and the HA end-to-end test checks them against
// running coordinators and etcd members.
var HAMetrics = struct{ Coordinator, Etcd []string }{
	Coordinator: []string{"slackline_coordinator_leader", "slackline_coordinator_leader_terms_total"},
	Etcd:        []string{"etcd_server_leader_changes_seen_total"},
}

// RuleQueries returns every rule's expression, and the names the
// recording rules define.
func RuleQueries() (queries []Query, recorded []string, err error) {
	names, err := fs.Glob(files, RulesGlob)
	if err != nil {
		return nil, nil, err
	}
	for _, name := range names {
		raw, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, nil, err
		}
		var rg RuleGroups
		if err := yaml.Unmarshal(raw, &rg); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, g := range rg.Groups {
			for _, r := range g.Rules {
				id := r.Record
				if r.Alert != "" {
					id = "alert " + r.Alert
				} else {
					recorded = append(recorded, r.Record)
				}
				queries = append(queries, Query{Where: fmt.Sprintf("%s group %q rule %s", name, g.Name, id), Expr: r.Expr})
			}
		}
	}
	return queries, recorded, nil
}

var (
	grafanaInterval = regexp.MustCompile(`\$__[a-z_]*interval(_ms)?|\$__range`)
	grafanaVariable = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)
)

// MetricNames parses expr with the Prometheus PromQL parser and returns
// the metric names its selectors name, sorted and unique. Grafana's
// interval variables become 5m and other variables ".*" (valid only inside
// a label matcher's string, where the dashboard uses them).
func MetricNames(expr string) ([]string, error) {
	expr = grafanaInterval.ReplaceAllString(expr, "5m")
	expr = grafanaVariable.ReplaceAllString(expr, ".*")
	// Default options: the stable grammar, no experimental functions.
	parsed, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, vs := range parser.ExtractSelectors(parsed) {
		for _, m := range vs {
			if m.Name == "__name__" {
				names = append(names, m.Value)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// Exported reports whether name is a series of a metric family in
// families: the family itself, or a histogram's or summary's _bucket,
// _sum or _count series.
func Exported(name string, families map[string]bool) bool {
	if families[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && families[base] {
			return true
		}
	}
	return false
}
