package deploy

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	// docMetric is a Slackline metric name in prose or code (not a
	// recording rule's, which has colons around it).
	docMetric = regexp.MustCompile(`(^|[^:a-z_])(slackline_[a-z0-9_]*[a-z0-9])`)
	// goMetric is a metric name in a Go string literal.
	goMetric = regexp.MustCompile(`"(slackline_[a-z0-9_]+)"`)
)

// registeredMetrics returns the slackline_ names that the repository's
// non-test Go code spells out (where metrics are declared).
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".." || d.Name() == "gen") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range goMetric.FindAllStringSubmatch(string(raw), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestDocsNameExistingMetrics: every slackline_ metric that README.md and
// docs/*.md name is declared by the code (histograms' _bucket, _sum and
// _count included), so the docs send nobody looking for a series that
// does not exist. (The dashboard's and rules' names are checked against
// running binaries by e2e's TestLiveView.)
func TestDocsNameExistingMetrics(t *testing.T) {
	t.Parallel()
	known := registeredMetrics(t)
	if len(known) < 30 {
		t.Fatalf("found %d metric names in the code: the walk went wrong", len(known))
	}
	docs, _ := filepath.Glob("../docs/*.md")
	docs = append(docs, "../README.md")
	checked := 0
	for _, file := range docs {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		for _, idx := range docMetric.FindAllStringSubmatchIndex(text, -1) {
			for _, name := range expandBraces(text[idx[4]:idx[5]], text[idx[5]:]) {
				base := name
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					base = strings.TrimSuffix(base, suffix)
				}
				checked++
				if strings.HasPrefix(text[idx[5]:], "_*") {
					// A family (slackline_jobs_*): some declared metric is in it.
					if !slices.ContainsFunc(slices.Collect(maps.Keys(known)), func(k string) bool { return strings.HasPrefix(k, name+"_") }) {
						t.Errorf("%s names the family %s_*, of which no code declares a metric", filepath.Base(file), name)
					}
					continue
				}
				if !known[name] && !known[base] {
					t.Errorf("%s names %s, which no code declares", filepath.Base(file), name)
				}
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked only %d names", checked)
	}
}

// braces is a shell-style alternative list after a name: _{a,b}_total.
var braces = regexp.MustCompile(`^_\{([a-z0-9_,]+)\}([a-z0-9_]*)`)

// expandBraces returns the names that name followed by rest spells:
// slackline_x_{a,b}_total is slackline_x_a_total and slackline_x_b_total.
func expandBraces(name, rest string) []string {
	m := braces.FindStringSubmatch(rest)
	if m == nil {
		return []string{name}
	}
	var out []string
	for _, alt := range strings.Split(m[1], ",") {
		out = append(out, name+"_"+alt+m[2])
	}
	return out
}
