package main

import (
	"strings"
	"testing"
)

// TestFlagErrors: bad flags are refused before anything starts, each error
// naming its flag.
func TestFlagErrors(t *testing.T) {
	t.Parallel()
	etcd := []string{"--insecure", "--etcd-endpoints", "http://127.0.0.1:1"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"log format", []string{"--insecure", "--log-format", "xml"}, "log-format"},
		{"no advertise URL", append(etcd, "--listen", ":5060", "--etcd-prefix", "/jobs/"), "--advertise-url is required"},
		{"bad advertise URL", append(etcd, "--listen", "127.0.0.1:5060", "--advertise-url", "jobs-0:5060"), "--advertise-url"},
		{"the coordinators' prefix", append(etcd, "--listen", "127.0.0.1:5060", "--etcd-prefix", "/slackline/"), "coordinators' default prefix"},
		{"prefix without a slash", append(etcd, "--listen", "127.0.0.1:5060", "--etcd-prefix", "/jobs"), "--etcd-prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := run(tt.args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%q) = %v, want an error naming %q", tt.args, err, tt.want)
			}
		})
	}
}
