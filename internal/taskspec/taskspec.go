package taskspec

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/url"
	"path"
	"strings"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// Limits on the artifacts and the health check a task may ask for.
const (
	// MaxURIs bounds the artifacts of one task.
	MaxURIs = 32
	// MaxURILength bounds one URL.
	MaxURILength = 4096
	// MaxOutputFileLength bounds an output_file name.
	MaxOutputFileLength = 1024
	// MinHealthInterval is the shortest interval between two checks of a
	// task: checks must cost little.
	MinHealthInterval = time.Second
	// MaxHealthSeconds bounds delay, interval, timeout and grace period.
	MaxHealthSeconds = 24 * 3600
	// MaxConsecutiveFailures bounds consecutive_failures.
	MaxConsecutiveFailures = 1000
)

// Defaults of a HealthCheck's optional fields (Mesos's).
const (
	DefaultHealthDelay               = 15 * time.Second
	DefaultHealthInterval            = 10 * time.Second
	DefaultHealthTimeout             = 20 * time.Second
	DefaultHealthGracePeriod         = 10 * time.Second
	DefaultHealthConsecutiveFailures = 3
)

// ErrInvalid is wrapped by every error of this package.
var ErrInvalid = errors.New("invalid task")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Extract formats an artifact may be unpacked from.
const (
	ExtractNone  = ""
	ExtractTar   = "tar"
	ExtractTarGz = "tar.gz"
	ExtractZip   = "zip"
)

// ExtractFormat returns the canonical name of an extract value ("tgz" is
// "tar.gz"), or an error for one this package does not know.
func ExtractFormat(v string) (string, error) {
	switch strings.ToLower(v) {
	case "":
		return ExtractNone, nil
	case "tar":
		return ExtractTar, nil
	case "tar.gz", "tgz":
		return ExtractTarGz, nil
	case "zip":
		return ExtractZip, nil
	}
	return "", fmt.Errorf("%q: want tar, tar.gz (tgz) or zip", v)
}

// URIs checks a command's artifacts; the error names the field
// (command.uris[i].value, .sha256, .extract, .output_file, .cache).
func URIs(uris []*slacklinev1.CommandInfo_URI) error {
	if len(uris) > MaxURIs {
		return invalidf("command.uris: %d artifacts, at most %d allowed", len(uris), MaxURIs)
	}
	for i, u := range uris {
		field := fmt.Sprintf("command.uris[%d]", i)
		if u == nil {
			return invalidf("%s: empty", field)
		}
		if _, err := ParseURL(u.GetValue()); err != nil {
			return invalidf("%s.value: %v", field, err)
		}
		if s := u.GetSha256(); s != "" {
			if b, err := hex.DecodeString(s); err != nil || len(b) != 32 {
				return invalidf("%s.sha256: %q: want 64 hex digits", field, s)
			}
		}
		if u.GetCache() && u.GetSha256() == "" {
			return invalidf("%s.cache: a cached artifact needs its sha256 (the cache is keyed by content)", field)
		}
		format, err := ExtractFormat(u.GetExtract())
		if err != nil {
			return invalidf("%s.extract: %v", field, err)
		}
		if format != ExtractNone && u.GetExecutable() {
			return invalidf("%s.executable: an extracted archive cannot be executable", field)
		}
		if out := u.GetOutputFile(); out != "" {
			if err := RelativePath(out); err != nil {
				return invalidf("%s.output_file: %v", field, err)
			}
		} else if format == ExtractNone {
			if _, err := DefaultOutputFile(u.GetValue()); err != nil {
				return invalidf("%s.output_file: %v", field, err)
			}
		}
	}
	return nil
}

// ParseURL parses an artifact's URL: http or https, with a host, no user
// information (credentials do not belong in a task's description).
func ParseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("empty URL")
	}
	if len(raw) > MaxURILength {
		return nil, fmt.Errorf("URL is %d bytes, at most %d allowed", len(raw), MaxURILength)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: only http and https URLs are fetched", raw)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q: no host", raw)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%q: user information in a URL is not allowed", u.Redacted())
	}
	return u, nil
}

// DefaultOutputFile is the name an artifact gets in the sandbox without
// output_file: the last element of its URL's path.
func DefaultOutputFile(raw string) (string, error) {
	u, err := ParseURL(raw)
	if err != nil {
		return "", err
	}
	base := path.Base(u.Path)
	if base == "/" || base == "." || base == ".." || base == "" {
		return "", fmt.Errorf("URL %q has no file name; set output_file", raw)
	}
	if err := RelativePath(base); err != nil {
		return "", err
	}
	return base, nil
}

// RelativePath checks a path inside the sandbox: relative, clean, no ".."
// element, no NUL.
func RelativePath(p string) error {
	switch {
	case len(p) > MaxOutputFileLength:
		return fmt.Errorf("%d bytes, at most %d allowed", len(p), MaxOutputFileLength)
	case strings.ContainsRune(p, 0):
		return errors.New("contains NUL")
	case path.IsAbs(p):
		return fmt.Errorf("%q is absolute: want a path relative to the sandbox", p)
	case path.Clean(p) != p || p == ".":
		return fmt.Errorf("%q is not a clean relative path", p)
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return fmt.Errorf("%q leaves the sandbox", p)
		}
	}
	return nil
}

// Health is a health check with its defaults resolved.
type Health struct {
	Type                slacklinev1.HealthCheck_Type
	Command             *slacklinev1.CommandInfo
	Port                uint16
	Path, Scheme        string // HTTP only
	Delay, Interval     time.Duration
	Timeout, Grace      time.Duration
	ConsecutiveFailures int
}

// HealthCheck checks a task's health check and resolves its defaults; the
// error names the field (health_check.http.port, ...).
func HealthCheck(hc *slacklinev1.HealthCheck) (Health, error) {
	h := Health{Type: hc.GetType()}
	switch hc.GetType() {
	case slacklinev1.HealthCheck_TYPE_COMMAND:
		cmd := hc.GetCommand()
		if cmd.GetValue() == "" {
			return h, invalidf("health_check.command.value: empty (a COMMAND check needs a command)")
		}
		if len(cmd.GetUris()) > 0 {
			return h, invalidf("health_check.command.uris: a check fetches nothing")
		}
		h.Command = cmd
	case slacklinev1.HealthCheck_TYPE_HTTP:
		port := hc.GetHttp().GetPort()
		if port == 0 || port > 65535 {
			return h, invalidf("health_check.http.port: %d: want 1-65535", port)
		}
		h.Port = uint16(port)
		h.Path = hc.GetHttp().GetPath()
		if h.Path == "" {
			h.Path = "/"
		}
		if !strings.HasPrefix(h.Path, "/") || strings.HasPrefix(h.Path, "//") || len(h.Path) > MaxURILength {
			return h, invalidf("health_check.http.path: %q: want an absolute path such as /health", h.Path)
		}
		if _, err := url.ParseRequestURI(h.Path); err != nil {
			return h, invalidf("health_check.http.path: %v", err)
		}
		h.Scheme = hc.GetHttp().GetScheme()
		if h.Scheme == "" {
			h.Scheme = "http"
		}
		if h.Scheme != "http" && h.Scheme != "https" {
			return h, invalidf("health_check.http.scheme: %q: want http or https", h.Scheme)
		}
	case slacklinev1.HealthCheck_TYPE_TCP:
		port := hc.GetTcp().GetPort()
		if port == 0 || port > 65535 {
			return h, invalidf("health_check.tcp.port: %d: want 1-65535", port)
		}
		h.Port = uint16(port)
	default:
		return h, invalidf("health_check.type: %v: want TYPE_COMMAND, TYPE_HTTP or TYPE_TCP", hc.GetType())
	}
	var err error
	durations := []struct {
		name  string
		value *float64
		def   time.Duration
		min   time.Duration
		out   *time.Duration
	}{
		{"delay_seconds", hc.DelaySeconds, DefaultHealthDelay, 0, &h.Delay},
		{"interval_seconds", hc.IntervalSeconds, DefaultHealthInterval, MinHealthInterval, &h.Interval},
		{"timeout_seconds", hc.TimeoutSeconds, DefaultHealthTimeout, time.Millisecond, &h.Timeout},
		{"grace_period_seconds", hc.GracePeriodSeconds, DefaultHealthGracePeriod, 0, &h.Grace},
	}
	for _, d := range durations {
		if *d.out, err = seconds(d.value, d.def, d.min); err != nil {
			return h, invalidf("health_check.%s: %v", d.name, err)
		}
	}
	h.ConsecutiveFailures = DefaultHealthConsecutiveFailures
	if hc.ConsecutiveFailures != nil {
		n := hc.GetConsecutiveFailures()
		if n < 1 || n > MaxConsecutiveFailures {
			return h, invalidf("health_check.consecutive_failures: %d: want 1-%d", n, MaxConsecutiveFailures)
		}
		h.ConsecutiveFailures = int(n)
	}
	return h, nil
}

func seconds(v *float64, def, minimum time.Duration) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	s := *v
	if math.IsNaN(s) || math.IsInf(s, 0) || s < 0 || s > MaxHealthSeconds {
		return 0, fmt.Errorf("%v: want 0-%d seconds", s, MaxHealthSeconds)
	}
	d := time.Duration(s * float64(time.Second))
	if d < minimum {
		return 0, fmt.Errorf("%v: at least %v", s, minimum)
	}
	return d, nil
}

// Task checks the fetch and health fields of a task.
func Task(t *slacklinev1.TaskInfo) error {
	if err := URIs(t.GetCommand().GetUris()); err != nil {
		return err
	}
	if hc := t.GetHealthCheck(); hc != nil {
		if _, err := HealthCheck(hc); err != nil {
			return err
		}
	}
	return nil
}
