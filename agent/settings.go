package agent

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/slackline/slackline/agent/shadow"
	"github.com/slackline/slackline/internal/cliconfig"
)

// Estimator and QoS settings (#29 parts 4 and 5): the flags that shadow
// candidates (--shadow) and fleet profiles may set, applied to a copy of
// an agent's Options and validated by Validate, and the one place that
// builds an estimator and QoS controllers from Options.

// loopFlags are estimator and QoS flags that are no settings of the
// estimator or controllers but of the agent's loops (how often they run):
// a shadow runs on the active loops' inputs, at their pace.
var loopFlags = []string{"oversubscribed-resources-interval", "qos-correction-interval-min"}

// otherSettingFlags are settings of the estimator without its prefix.
var otherSettingFlags = []string{"estimator", "fixed-revocable", "oversubscribe-memory"}

// IsSettingFlag tells whether the agent flag name (without dashes) is an
// estimator or QoS setting that WithSettings accepts: --estimator,
// --fixed-revocable, --oversubscribe-memory and every --estimator-* and
// --qos-* flag but the loops' intervals (--oversubscribed-resources-interval,
// --qos-correction-interval-min) and --protect-cgroup (which services
// exist is the node's, not a setting).
func IsSettingFlag(name string) bool {
	if slices.Contains(loopFlags, name) {
		return false
	}
	return slices.Contains(otherSettingFlags, name) || strings.HasPrefix(name, "estimator-") || strings.HasPrefix(name, "qos-")
}

// SettingFlags lists the flags IsSettingFlag accepts, sorted.
func SettingFlags() []string {
	var names []string
	fs := flag.NewFlagSet("settings", flag.ContinueOnError)
	new(Options).AddFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if IsSettingFlag(f.Name) {
			names = append(names, f.Name)
		}
	})
	return names
}

// Setting is one estimator or QoS flag and its value as a flag would print
// it.
type Setting struct{ Flag, Value string }

// refused is the flag.Value of a flag a settings map may not set:
// setting it is the error why.
type refused struct{ why error }

func (r refused) String() string { return "" }

func (r refused) Set(string) error { return r.why }

// WithSettings returns a copy of o with the settings in data applied and
// the settings that differ from o's: data is a YAML (or JSON) mapping of
// flag names to values, as a --config file is (internal/cliconfig), that
// may name only setting flags (IsSettingFlag). Each value goes through its
// flag's own parser, and the copy's settings are checked by
// ValidateSettings, the part of Validate that covers them (the rest of o is
// left as it was). Errors name source (a file name or a profile) and the
// bad key or flag.
func (o Options) WithSettings(source string, data []byte) (Options, []Setting, error) {
	c, changed, err := o.applySettings(source, data, IsSettingFlag, func(name string) error {
		return fmt.Errorf("--%s is not an estimator or QoS setting (those are --estimator, --fixed-revocable, --oversubscribe-memory, --estimator-* and --qos-* but --oversubscribed-resources-interval and --qos-correction-interval-min)", name)
	})
	if err != nil {
		return o, nil, err
	}
	if err := c.ValidateSettings(); err != nil {
		return o, nil, fmt.Errorf("%s: %w", source, err)
	}
	return c, changed, nil
}

// applySettings returns a copy of o with data (a --config style mapping of
// flag names to values) applied through the flags' own parsers, and the
// settings that changed. Only flags allowed accepts may be set; setting
// another is the error refusal returns for it. The copy is not validated.
func (o Options) applySettings(source string, data []byte, allowed func(flag string) bool, refusal func(flag string) error) (Options, []Setting, error) {
	c := o
	// Bind a flag set to c: AddFlags resets c's fields to the defaults, so
	// o's values are put back, under the same addresses, afterwards.
	fs := flag.NewFlagSet(source, flag.ContinueOnError)
	c.AddFlags(fs)
	c = o
	// Fields the flags could change in place must not be shared with o.
	c.QoSControllers = slices.Clone(o.QoSControllers)
	c.ProtectCgroups = slices.Clone(o.ProtectCgroups)
	c.Shadows = nil // a candidate runs no shadows of its own
	restricted := flag.NewFlagSet(source, flag.ContinueOnError)
	before := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if allowed(f.Name) {
			restricted.Var(f.Value, f.Name, f.Usage)
			before[f.Name] = f.Value.String()
		} else {
			restricted.Var(refused{refusal(f.Name)}, f.Name, f.Usage)
		}
	})
	if err := cliconfig.Apply(restricted, source, data); err != nil {
		return o, nil, err
	}
	var changed []Setting
	fs.VisitAll(func(f *flag.Flag) {
		if b, ok := before[f.Name]; ok && f.Value.String() != b {
			changed = append(changed, Setting{Flag: f.Name, Value: f.Value.String()})
		}
	})
	return c, changed, nil
}

// ShadowSpec is one --shadow NAME=FILE: candidate settings run in shadow
// (agent/shadow). Data is the file's contents, read when the flag is set.
type ShadowSpec struct {
	Name, File string
	Data       []byte
}

// String returns NAME=FILE.
func (s ShadowSpec) String() string { return s.Name + "=" + s.File }

// ParseShadowSpec parses NAME=FILE and reads FILE (at most
// cliconfig.MaxFileSize bytes).
func ParseShadowSpec(value string) (ShadowSpec, error) {
	name, file, ok := strings.Cut(value, "=")
	if !ok || file == "" {
		return ShadowSpec{}, fmt.Errorf("%q: want NAME=FILE", value)
	}
	data, err := readSettingsFile(file)
	if err != nil {
		return ShadowSpec{}, err
	}
	return ShadowSpec{Name: name, File: file, Data: data}, nil
}

func readSettingsFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > cliconfig.MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, cliconfig.MaxFileSize)
	}
	return os.ReadFile(path)
}

// shadowsValue is --shadow: repeatable.
type shadowsValue struct{ l *[]ShadowSpec }

func (v shadowsValue) String() string {
	if v.l == nil {
		return ""
	}
	var parts []string
	for _, s := range *v.l {
		parts = append(parts, s.String())
	}
	return strings.Join(parts, ",")
}

func (v shadowsValue) Set(value string) error {
	s, err := ParseShadowSpec(value)
	if err != nil {
		return err
	}
	*v.l = append(*v.l, s)
	return nil
}

// validateShadows checks --shadow: at most shadow.MaxShadows, names
// valid and distinct, each file's settings valid.
func (o *Options) validateShadows() error {
	_, err := o.NewShadows()
	return err
}

// NewShadows builds one shadow.Shadow per --shadow candidate from a copy
// of o with the candidate's settings applied (WithSettings), each with a
// fresh estimator and QoS controllers (NewControllers). Errors name the
// shadow, its file and the bad key.
func (o Options) NewShadows() ([]*shadow.Shadow, error) {
	if len(o.Shadows) > shadow.MaxShadows {
		return nil, fmt.Errorf("--shadow: %d candidates, at most %d", len(o.Shadows), shadow.MaxShadows)
	}
	var errs []error
	var shadows []*shadow.Shadow
	seen := map[string]bool{}
	for _, spec := range o.Shadows {
		fail := func(err error) { errs = append(errs, fmt.Errorf("--shadow %s: %w", spec, err)) }
		if err := shadow.CheckName(spec.Name); err != nil {
			fail(err)
			continue
		}
		if seen[spec.Name] {
			fail(errors.New("name given twice"))
			continue
		}
		seen[spec.Name] = true
		candidate, settings, err := o.WithSettings(spec.File, spec.Data)
		if err != nil {
			fail(err)
			continue
		}
		ctl, err := candidate.NewControllers()
		if err != nil {
			fail(err)
			continue
		}
		cfg := shadow.Config{Name: spec.Name, Estimator: ctl.Estimator, EstimatorName: ctl.EstimatorName,
			QoS: ctl.QoS, QoSNames: ctl.QoSNames}
		for _, s := range settings {
			cfg.Settings = append(cfg.Settings, shadow.Setting{Flag: s.Flag, Value: s.Value})
		}
		shadows = append(shadows, shadow.New(cfg))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return shadows, nil
}
