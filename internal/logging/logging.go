// Package logging builds a daemon's slog.Logger from its --log-format and
// --log-level flags: text (logfmt-like, the default) or JSON, one record
// per line on the writer given (stderr). Every Slackline daemon takes the
// same two flags; an invalid value is an error naming the flag.
package logging

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// Formats of --log-format.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// FormatUsage is the help text of --log-format.
const FormatUsage = "log format: text (key=value) or json (one object per line, for log collectors)"

// New returns a logger writing records at level and above to w in format
// (FormatText or FormatJSON).
func New(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case FormatText, "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case FormatJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want %s or %s", format, FormatText, FormatJSON)
}

// Format is the value of a --log-format flag: it refuses anything but
// text and json when set (so a config file's typo fails at parse time,
// naming the key).
type Format string

// String returns the format.
func (f *Format) String() string {
	if f == nil || *f == "" {
		return FormatText
	}
	return string(*f)
}

// Set checks and sets the format.
func (f *Format) Set(s string) error {
	if s != FormatText && s != FormatJSON {
		return fmt.Errorf("want %s or %s", FormatText, FormatJSON)
	}
	*f = Format(s)
	return nil
}

// Type names the flag's value for pflag's help.
func (f *Format) Type() string { return "format" }

var _ flag.Value = (*Format)(nil)
