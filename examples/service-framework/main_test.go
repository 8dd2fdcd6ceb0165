package main

import (
	"io"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	opts, err := parseFlags([]string{"--instances", "3", "--name", "web", "--label", "a=b"}, io.Discard)
	if err != nil || opts.instances != 3 || opts.minAvailable != 3 || opts.labels["a"] != "b" {
		t.Fatalf("parseFlags = %+v, %v; want 3 instances, min-available defaulting to 3", opts, err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--instances", "0"}, "--instances must be at least 1"},
		{[]string{"--instances", "2", "--min-available", "3"}, "--min-available 3 is more than --instances 2"},
		{[]string{"--name", "a b"}, "--name"},
		{[]string{"--move-timeout", "-1s"}, "must not be negative"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--label", "novalue"}, "not key=value"},
	} {
		if _, err := parseFlags(tt.args, io.Discard); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseFlags(%q) = %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
	if code := run([]string{"--task-resources", "bogus"}, io.Discard); code != 2 {
		t.Errorf("run with bad --task-resources = %d, want 2", code)
	}
}
