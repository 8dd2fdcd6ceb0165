package frameworkapi

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestConfigCredentials checks how New takes a CA and a token file: a token
// is never sent in clear text, and an HTTPClient is not silently ignored.
func TestConfigCredentials(t *testing.T) {
	token := filepath.Join(t.TempDir(), "batch.token")
	if err := os.WriteFile(token, []byte("slackline_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	info := &slacklinev1.FrameworkInfo{Name: "fw"}
	for _, tt := range []struct {
		name string
		cfg  Config
		want string // "" : New succeeds
	}{
		{"token over https", Config{Coordinator: "https://coordinator:5050", TokenFile: token, Framework: info}, ""},
		{"token over http", Config{Coordinator: "http://coordinator:5050", TokenFile: token, Framework: info}, "only over TLS"},
		{"missing token file", Config{Coordinator: "https://coordinator:5050", TokenFile: token + ".missing", Framework: info}, "read token"},
		{"missing CA", Config{Coordinator: "https://coordinator:5050", CAFile: token + ".missing", Framework: info}, "read CA"},
		{"both", Config{Coordinator: "https://coordinator:5050", TokenFile: token, HTTPClient: http.DefaultClient, Framework: info}, "both"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if (tt.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want %q", err, tt.want)
			}
		})
	}
}
