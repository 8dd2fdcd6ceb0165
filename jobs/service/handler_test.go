package service

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
)

// TestJobsPageIsOpenAndTheAPIIsNot: the jobs page's static files need no
// credentials (they hold no data) and carry a strict content security
// policy; JobService without a token is refused.
func TestJobsPageIsOpenAndTheAPIIsNot(t *testing.T) {
	t.Parallel()
	store, err := OpenStore(filepath.Join(t.TempDir(), "jobs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	pol, err := auth.ParsePolicy([]byte("version: 1\nprincipals: {}\nacls: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(Config{Store: store, Framework: &slacklinev1.FrameworkInfo{Name: "jobs", Roles: []string{"*"}}, Authz: auth.New(pol)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(body) == 0 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("GET %s: %s, %d bytes, CSP %q", path, resp.Status, len(body), resp.Header.Get("Content-Security-Policy"))
		}
	}
	resp, err := http.Post(srv.URL+"/slackline.v1.JobService/GetJobs", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GetJobs without a token: %s, want 401", resp.Status)
	}
}
