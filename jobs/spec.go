package jobs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"go.yaml.in/yaml/v3"

	"github.com/slackline/slackline/resources"
)

// Limits of a spec. Each is named in the error of a spec beyond it.
const (
	// MaxSpecBytes bounds a spec's text.
	MaxSpecBytes = 64 << 10
	// MaxCompletions bounds a job's indexes.
	MaxCompletions = 100_000
	// MaxRetries bounds a spec's retries.
	MaxRetries = 100
	// MaxPriority is the highest priority.
	MaxPriority = 1000
	// MaxNameLength bounds a job's name (its runs add "-<unix seconds>").
	MaxNameLength = 52
	// maxEnv bounds the environment's entries and labels'.
	maxEnv = 128
)

// Defaults of a spec's optional fields.
const (
	DefaultRetries     = 3
	DefaultBackoff     = 10 * time.Second
	DefaultMaxBackoff  = 5 * time.Minute
	DefaultPreferWait  = 30 * time.Second
	DefaultRole        = "*"
	DefaultConcurrency = ConcurrencyForbid
	DefaultRevocable   = RevocableNever
)

// Revocable is a job's policy towards revocable (slack) resources.
type Revocable string

// Revocable policies.
const (
	// RevocableOnly runs tasks on revocable resources only (slack).
	RevocableOnly Revocable = "only"
	// RevocablePrefer runs tasks on revocable resources first, and on
	// regular ones once an index waited PreferWait.
	RevocablePrefer Revocable = "prefer"
	// RevocableNever runs tasks on regular resources only.
	RevocableNever Revocable = "never"
)

// Concurrency is what a cron job does when a run is due while an earlier
// run is still active.
type Concurrency string

// Concurrency policies.
const (
	// ConcurrencyForbid skips the new run.
	ConcurrencyForbid Concurrency = "forbid"
	// ConcurrencyAllow starts the new run beside the active ones.
	ConcurrencyAllow Concurrency = "allow"
	// ConcurrencyReplace cancels the active runs and starts the new one.
	ConcurrencyReplace Concurrency = "replace"
)

// Duration is a time.Duration written as Go text ("90s", "1h30m") in specs.
type Duration time.Duration

// MarshalText writes the duration as Go text.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads Go duration text.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration like 90s or 1h30m", b)
	}
	*d = Duration(v)
	return nil
}

// Spec is a job as submitted: YAML or JSON with these keys (see
// docs/jobs.md). ParseSpec reads, defaults and validates it.
type Spec struct {
	// Name names the job: lower-case letters, digits and '-', starting
	// with a letter.
	Name string `yaml:"name" json:"name"`
	// Role is the role the job's tasks run in (the queue it waits in).
	Role string `yaml:"role,omitempty" json:"role,omitempty"`
	// User is the Unix user the tasks run as ("": the agent's default).
	User string `yaml:"user,omitempty" json:"user,omitempty"`
	// Command is a shell command; each task has SLACKLINE_JOB_INDEX.
	Command string `yaml:"command" json:"command"`
	// Environment is added to each task's environment.
	Environment map[string]string `yaml:"environment,omitempty" json:"environment,omitempty"`
	// Labels are added to each task's labels.
	Labels map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	// Resources are each task's, as resources text ("cpus:1;mem:2048").
	Resources string `yaml:"resources" json:"resources"`
	// Completions is the number of indexes (0..Completions-1); each must
	// succeed once.
	Completions int `yaml:"completions,omitempty" json:"completions,omitempty"`
	// Parallelism bounds the tasks running at once (default Completions).
	Parallelism int `yaml:"parallelism,omitempty" json:"parallelism,omitempty"`
	// Retries is how many failures one index may have; one more fails the
	// job. Nil: DefaultRetries.
	Retries *int `yaml:"retries,omitempty" json:"retries,omitempty"`
	// Backoff is the wait before the first retry of an index, doubled at
	// each further failure up to MaxBackoff.
	Backoff    Duration `yaml:"backoff,omitempty" json:"backoff,omitempty"`
	MaxBackoff Duration `yaml:"max_backoff,omitempty" json:"max_backoff,omitempty"`
	// Deadline bounds a job's (a run's) life from its submission; past it
	// the job fails and its tasks are killed. Zero: none.
	Deadline Duration `yaml:"deadline,omitempty" json:"deadline,omitempty"`
	// Priority orders jobs in their role's queue (higher first; then
	// submission order).
	Priority int `yaml:"priority,omitempty" json:"priority,omitempty"`
	// Revocable is only, prefer or never.
	Revocable Revocable `yaml:"revocable,omitempty" json:"revocable,omitempty"`
	// PreferWait is how long an index of a prefer job waits for revocable
	// resources before it takes regular ones.
	PreferWait Duration `yaml:"prefer_wait,omitempty" json:"prefer_wait,omitempty"`
	// Schedule makes a cron job: a cron expression of 5 fields (minute
	// hour day-of-month month day-of-week), 6 with seconds first, or a
	// descriptor (@hourly, @every 10m).
	Schedule string `yaml:"schedule,omitempty" json:"schedule,omitempty"`
	// Concurrency is a cron job's forbid, allow or replace.
	Concurrency Concurrency `yaml:"concurrency,omitempty" json:"concurrency,omitempty"`
}

// ErrInvalidSpec is wrapped by every error of ParseSpec and Validate about
// the spec's content.
var ErrInvalidSpec = errors.New("invalid job spec")

// FieldError is a spec error about one field.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap makes every FieldError an ErrInvalidSpec.
func (e *FieldError) Unwrap() error { return ErrInvalidSpec }

func fieldf(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

var (
	nameRE    = regexp.MustCompile(`^[a-z]([a-z0-9-]*[a-z0-9])?$`)
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	cronSpec  = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
)

// IndexEnv is the environment variable that carries a task's index.
const IndexEnv = "SLACKLINE_JOB_INDEX"

// ParseSpec reads a spec (YAML, or JSON, which is YAML), fills in its
// defaults and validates it. Unknown keys are errors. Errors wrap
// ErrInvalidSpec and name the field.
func ParseSpec(text []byte) (Spec, error) {
	if len(text) > MaxSpecBytes {
		return Spec{}, fieldf("spec", "%d bytes, at most %d (MaxSpecBytes)", len(text), MaxSpecBytes)
	}
	var s Spec
	dec := yaml.NewDecoder(bytes.NewReader(text))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return Spec{}, specYAMLError(text, err)
	}
	s.setDefaults()
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// specYAMLError names the field of a decoding error: it decodes each
// top-level key alone to find the first one that fails.
func specYAMLError(text []byte, err error) error {
	if errors.Is(err, io.EOF) {
		return fieldf("spec", "empty")
	}
	var doc yaml.Node
	if yaml.Unmarshal(text, &doc) == nil && len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		m := doc.Content[0]
		for i := 0; i+1 < len(m.Content); i += 2 {
			key := m.Content[i].Value
			if !slices.Contains(specFields(), key) {
				return fieldf(key, "unknown field (known: %s)", strings.Join(specFields(), ", "))
			}
			one := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{m.Content[i], m.Content[i+1]}}
			var s Spec
			if ferr := one.Decode(&s); ferr != nil {
				return fieldf(key, "%s", strings.TrimPrefix(ferr.Error(), "yaml: "))
			}
		}
	}
	return fieldf("spec", "%s", strings.TrimPrefix(err.Error(), "yaml: "))
}

// specFields lists the spec's keys, sorted.
func specFields() []string {
	f := []string{"name", "role", "user", "command", "environment", "labels", "resources", "completions",
		"parallelism", "retries", "backoff", "max_backoff", "deadline", "priority", "revocable", "prefer_wait",
		"schedule", "concurrency"}
	sort.Strings(f)
	return f
}

func (s *Spec) setDefaults() {
	if s.Role == "" {
		s.Role = DefaultRole
	}
	if s.Completions == 0 {
		s.Completions = 1
	}
	if s.Parallelism == 0 {
		s.Parallelism = s.Completions
	}
	if s.Retries == nil {
		r := DefaultRetries
		s.Retries = &r
	}
	if s.Backoff == 0 {
		s.Backoff = Duration(DefaultBackoff)
	}
	if s.MaxBackoff == 0 {
		s.MaxBackoff = Duration(max(DefaultMaxBackoff, time.Duration(s.Backoff)))
	}
	if s.Revocable == "" {
		s.Revocable = DefaultRevocable
	}
	if s.PreferWait == 0 && s.Revocable == RevocablePrefer {
		s.PreferWait = Duration(DefaultPreferWait)
	}
	if s.Schedule != "" && s.Concurrency == "" {
		s.Concurrency = DefaultConcurrency
	}
}

// Validate checks a defaulted spec. Errors wrap ErrInvalidSpec and name
// the field.
func (s Spec) Validate() error {
	switch {
	case s.Name == "":
		return fieldf("name", "missing")
	case len(s.Name) > MaxNameLength:
		return fieldf("name", "%q is %d characters, at most %d", s.Name, len(s.Name), MaxNameLength)
	case !nameRE.MatchString(s.Name):
		return fieldf("name", "%q: lower-case letters, digits and '-', starting with a letter and not ending with '-'", s.Name)
	case strings.ContainsFunc(s.Role, badNameRune) || s.Role == "." || s.Role == ".." || strings.Contains(s.Role, "/"):
		return fieldf("role", "%q: no spaces, control characters or '/'", s.Role)
	case strings.ContainsFunc(s.User, badNameRune) || strings.Contains(s.User, ":"):
		return fieldf("user", "%q: no spaces, control characters or ':'", s.User)
	case strings.TrimSpace(s.Command) == "":
		return fieldf("command", "missing")
	case len(s.Environment) > maxEnv:
		return fieldf("environment", "%d entries, at most %d", len(s.Environment), maxEnv)
	case len(s.Labels) > maxEnv:
		return fieldf("labels", "%d entries, at most %d", len(s.Labels), maxEnv)
	case s.Completions < 1 || s.Completions > MaxCompletions:
		return fieldf("completions", "%d: want 1 to %d", s.Completions, MaxCompletions)
	case s.Parallelism < 1:
		return fieldf("parallelism", "%d: want at least 1", s.Parallelism)
	case *s.Retries < 0 || *s.Retries > MaxRetries:
		return fieldf("retries", "%d: want 0 to %d", *s.Retries, MaxRetries)
	case s.Backoff < 0:
		return fieldf("backoff", "%s is negative", time.Duration(s.Backoff))
	case s.MaxBackoff < s.Backoff:
		return fieldf("max_backoff", "%s is below backoff %s", time.Duration(s.MaxBackoff), time.Duration(s.Backoff))
	case s.Deadline < 0:
		return fieldf("deadline", "%s is negative", time.Duration(s.Deadline))
	case s.Priority < 0 || s.Priority > MaxPriority:
		return fieldf("priority", "%d: want 0 to %d", s.Priority, MaxPriority)
	case !slices.Contains([]Revocable{RevocableOnly, RevocablePrefer, RevocableNever}, s.Revocable):
		return fieldf("revocable", "%q: want only, prefer or never", s.Revocable)
	case s.PreferWait < 0:
		return fieldf("prefer_wait", "%s is negative", time.Duration(s.PreferWait))
	case s.PreferWait != 0 && s.Revocable != RevocablePrefer:
		return fieldf("prefer_wait", "only with revocable: prefer")
	case s.Schedule == "" && s.Concurrency != "":
		return fieldf("concurrency", "only with a schedule")
	case s.Schedule != "" && !slices.Contains([]Concurrency{ConcurrencyForbid, ConcurrencyAllow, ConcurrencyReplace}, s.Concurrency):
		return fieldf("concurrency", "%q: want forbid, allow or replace", s.Concurrency)
	}
	for k := range s.Environment {
		if !envNameRE.MatchString(k) {
			return fieldf("environment", "%q is not a variable name", k)
		}
		if k == IndexEnv {
			return fieldf("environment", "%s is set by the job service", IndexEnv)
		}
	}
	for k := range s.Labels {
		if k == "" {
			return fieldf("labels", "empty key")
		}
	}
	need, err := resources.Parse(s.Resources)
	switch {
	case s.Resources == "":
		return fieldf("resources", "missing (e.g. \"cpus:1;mem:256\")")
	case err != nil:
		return fieldf("resources", "%v", err)
	case need.CPUs() <= 0:
		return fieldf("resources", "%q names no cpus", s.Resources)
	case need.Ports().Count() > 0:
		return fieldf("resources", "ports are not supported in job specs")
	}
	if s.Schedule != "" {
		if _, err := cronSpec.Parse(s.Schedule); err != nil {
			return fieldf("schedule", "%q: %v", s.Schedule, err)
		}
	}
	return nil
}

func badNameRune(r rune) bool { return r <= ' ' || r == 0x7f }

// Need returns the resources of each task.
func (s Spec) Need() resources.Resources {
	r, _ := resources.Parse(s.Resources) // validated
	return r
}

// schedule returns the parsed cron schedule; nil when the spec has none.
func (s Spec) schedule() cron.Schedule {
	if s.Schedule == "" {
		return nil
	}
	sch, err := cronSpec.Parse(s.Schedule)
	if err != nil {
		return nil
	}
	return sch
}

// backoff returns the wait after an index's failures-th failure.
func (s Spec) backoff(failures int) time.Duration {
	d := time.Duration(s.Backoff)
	for i := 1; i < failures && d < time.Duration(s.MaxBackoff); i++ {
		d *= 2
	}
	return min(d, time.Duration(s.MaxBackoff))
}
