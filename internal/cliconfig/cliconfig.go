// Package cliconfig gives every Slackline daemon the same two flags:
// --config FILE, a YAML file whose keys are the daemon's flag names, and
// --version, the module version and VCS revision the binary was built from.
//
// A config file is a YAML mapping from flag names (without dashes) to
// values, as Kubernetes components and koordlet take theirs:
//
//	listen: 0.0.0.0:5051
//	work-dir: /var/lib/slackline/agent
//	ebpf: true
//	monitor-interval: 100ms
//	qos-controller: [cpuset, interference, memory]
//	protect-cgroup: [system.slice/etcd.service, system.slice/nginx.service]
//
// Each value goes through the flag's own Set, so its types, syntax and
// validation are the flag's: a duration is "100ms", a bool "true" or
// "false", resources "cpus:4;mem:8192". A list becomes one comma-separated
// value for a flag of one of Go's flag types (a flag.Getter, such as
// --qos-controller's string) and one Set per item for other flags (the
// repeatable ones, such as --protect-cgroup); with pflag, a slice flag is
// replaced by the list. A key that is no flag is refused, naming the key,
// the file and the closest flag name; so are nested mappings, null values,
// duplicate keys, and the keys config and version.
//
// Flags given on the command line override the file: the file sets only
// the flags the command line did not. The flags that name secrets' files
// (SecretFlags: --tls-key, --authz, ...) also come from the environment
// (EnvName: SLACKLINE_TLS_KEY, SLACKLINE_AUTHZ, ...), between the command
// line and the file.
package cliconfig

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// MaxFileSize bounds a config file: a larger one is refused before it is
// parsed (a daemon's settings take a few KiB).
const MaxFileSize = 1 << 20

// Parse adds --config and --version to fs, parses args, and then either
// prints the version (--version) on stdout and returns done, or applies
// the --config file to the flags the command line did not set. With -h or
// --help it returns done after fs printed its usage. The caller returns
// when done or err is set.
func Parse(fs *flag.FlagSet, args []string) (done bool, err error) {
	return parse(fs, args, os.Stdout)
}

func parse(fs *flag.FlagSet, args []string, stdout io.Writer) (done bool, err error) {
	config := fs.String("config", "", "YAML file of settings, keyed by flag name (flags on the command line override it)")
	version := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, err
	}
	if *version {
		fmt.Fprintln(stdout, Version(fs.Name()))
		return true, nil
	}
	if err := ApplyEnv(fs); err != nil {
		return false, err
	}
	if *config == "" {
		return false, nil
	}
	return false, ApplyFile(fs, *config)
}

// ApplyFile sets the flags of fs that the command line did not set (fs is
// parsed) from the YAML file at path.
func ApplyFile(fs *flag.FlagSet, path string) error {
	data, err := readFile(path)
	if err != nil {
		return err
	}
	return Apply(fs, path, data)
}

// Apply is ApplyFile on the file's contents; name names the file in
// errors.
func Apply(fs *flag.FlagSet, name string, data []byte) error {
	return apply(goFlags{fs}, name, data)
}

// AddPFlags adds --config to a pflag (cobra) flag set; ApplyPFlagsFile
// applies the file it names once the flags are parsed. (cobra's own
// Command.Version gives --version.)
func AddPFlags(fs *pflag.FlagSet) *string {
	return fs.String("config", "", "YAML file of settings, keyed by flag name (flags on the command line override it)")
}

// ApplyPFlagsFile sets the flags of a parsed pflag set that the command
// line did not set (fs.Changed) from the YAML file at path; an empty path
// is no file.
func ApplyPFlagsFile(fs *pflag.FlagSet, path string) error {
	if path == "" {
		return nil
	}
	data, err := readFile(path)
	if err != nil {
		return err
	}
	return ApplyPFlags(fs, path, data)
}

// ApplyPFlags is ApplyPFlagsFile on the file's contents; name names the
// file in errors.
func ApplyPFlags(fs *pflag.FlagSet, name string, data []byte) error {
	return apply(pFlags{fs}, name, data)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("--config %s: larger than %d bytes", path, MaxFileSize)
	}
	return data, nil
}

// flagSet is what apply needs of a flag set, the standard library's or
// pflag's.
type flagSet interface {
	// set sets the flag name from a scalar (one item) or a list; ok is
	// false if there is no such flag.
	set(name string, items []string, list bool) (ok bool, err error)
	// onCommandLine tells whether the command line set the flag.
	onCommandLine(name string) bool
	// names lists the flags, for suggestions.
	names() []string
}

// reserved are keys that are flags but no settings.
var reserved = map[string]string{
	"config":  "a config file cannot name another",
	"version": "it is no setting",
	"help":    "it is no setting",
}

func apply(fs flagSet, name string, data []byte) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil // an empty file sets nothing
	} else if err != nil {
		return fmt.Errorf("--config %s: %w", name, err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return fmt.Errorf("--config %s:%d: want one YAML document", name, next.Line)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil // only comments
	}
	if root.Kind != yaml.MappingNode {
		return fmt.Errorf("--config %s:%d: want a mapping of flag names to values", name, root.Line)
	}
	var errs []error
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		fail := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("--config %s:%d: %s: %s", name, k.Line, k.Value, fmt.Sprintf(format, args...)))
		}
		if k.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Errorf("--config %s:%d: a key must be a flag name", name, k.Line))
			continue
		}
		key := k.Value
		if line, dup := seen[key]; dup {
			fail("set twice (first on line %d)", line)
			continue
		}
		seen[key] = k.Line
		if why, ok := reserved[key]; ok {
			fail("not allowed in a config file: %s", why)
			continue
		}
		items, list, err := values(v)
		if err != nil {
			fail("%v", err)
			continue
		}
		if fs.onCommandLine(key) {
			continue // the command line overrides the file
		}
		ok, err := fs.set(key, items, list)
		switch {
		case !ok:
			msg := "unknown setting (no such flag)"
			if s := closest(key, fs.names()); s != "" {
				msg += fmt.Sprintf("; did you mean %s?", s)
			}
			fail("%s", msg)
		case err != nil:
			fail("%v", err)
		}
	}
	return errors.Join(errs...)
}

// values returns a node's scalar or list items.
func values(v *yaml.Node) (items []string, list bool, err error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return nil, false, errors.New("no value (write \"\" for an empty string)")
		}
		return []string{v.Value}, false, nil
	case yaml.SequenceNode:
		for _, item := range v.Content {
			if item.Kind != yaml.ScalarNode || item.Tag == "!!null" {
				return nil, false, fmt.Errorf("line %d: a list item must be a plain value", item.Line)
			}
			items = append(items, item.Value)
		}
		return items, true, nil
	case yaml.AliasNode:
		return values(v.Alias)
	default:
		return nil, false, errors.New("want a value or a list of values, not a mapping")
	}
}

// goFlags adapts a standard library flag set.
type goFlags struct{ fs *flag.FlagSet }

func (g goFlags) set(name string, items []string, list bool) (bool, error) {
	f := g.fs.Lookup(name)
	if f == nil {
		return false, nil
	}
	getter, single := f.Value.(flag.Getter)
	if single && list {
		items = []string{strings.Join(items, ",")}
	}
	for _, item := range items {
		if err := f.Value.Set(item); err != nil {
			if single {
				if want := describe(getter.Get()); want != "" {
					return true, fmt.Errorf("invalid value %q: want %s", item, want)
				}
			}
			return true, fmt.Errorf("invalid value %q: %w", item, err)
		}
	}
	return true, nil
}

// describe says what a value of the standard flag types looks like (their
// Set errors say only "parse error").
func describe(v any) string {
	switch v.(type) {
	case time.Duration:
		return "a duration such as 250ms or 1m30s"
	case bool:
		return "true or false"
	case int, int64:
		return "an integer"
	case uint, uint64:
		return "a non-negative integer"
	case float64:
		return "a number"
	}
	return ""
}

func (g goFlags) onCommandLine(name string) bool {
	set := false
	g.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func (g goFlags) names() []string {
	var out []string
	g.fs.VisitAll(func(f *flag.Flag) { out = append(out, f.Name) })
	return out
}

// pFlags adapts a pflag flag set.
type pFlags struct{ fs *pflag.FlagSet }

func (p pFlags) set(name string, items []string, list bool) (bool, error) {
	f := p.fs.Lookup(name)
	if f == nil {
		return false, nil
	}
	if s, ok := f.Value.(pflag.SliceValue); ok {
		if err := s.Replace(items); err != nil {
			return true, fmt.Errorf("invalid value %q: %w", items, err)
		}
		return true, nil
	}
	if list {
		items = []string{strings.Join(items, ",")}
	}
	for _, item := range items {
		if err := f.Value.Set(item); err != nil {
			return true, fmt.Errorf("invalid value %q: %w", item, err)
		}
	}
	return true, nil
}

func (p pFlags) onCommandLine(name string) bool { return p.fs.Changed(name) }

func (p pFlags) names() []string {
	var out []string
	p.fs.VisitAll(func(f *pflag.Flag) { out = append(out, f.Name) })
	return out
}

// closest returns the name nearest to key (edit distance at most a third
// of its length, at least 2), or "".
func closest(key string, names []string) string {
	best, bestD := "", max(2, len(key)/3)+1
	slices.Sort(names)
	for _, n := range names {
		if _, r := reserved[n]; r {
			continue
		}
		if d := distance(key, n); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
