package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/slackline/slackline/internal/auth"
)

func TestCredentialsInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	var out bytes.Buffer
	root := newRootCommand(&out)
	root.SetArgs([]string{"credentials", "init", dir, "--hosts", "coordinator.example,10.0.0.1",
		"--agents", "a1,a2", "--frameworks", "batch,service", "--operators", "admin"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ca.crt", "ca.key", "coordinator.crt", "coordinator.key", "agent-a1.crt", "agent-a1.key",
		"agent-a2.crt", "agent-a2.key", "batch.token", "service.token", "admin.token", "authz.yaml", "crl.pem"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if !strings.Contains(out.String(), "wrote ") {
		t.Errorf("output %q", out.String())
	}
	pol, err := auth.LoadPolicy(filepath.Join(dir, "authz.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !pol.Allowed(&auth.Principal{Name: "service"}, auth.RegisterFrameworks, "service") {
		t.Error("service may not register in role service")
	}
	if w := pol.Warnings(); len(w) != 0 {
		t.Errorf("the written authz.yaml has warnings: %q", w)
	}
	authz, err := os.ReadFile(filepath.Join(dir, "authz.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "max_resources: \"" + auth.DefaultAgentMaxResources + "\""; !strings.Contains(string(authz), want) {
		t.Errorf("authz.yaml does not cap agents with %s:\n%s", want, authz)
	}
	// The coordinator's certificate is valid for both hosts.
	tlsConfig, err := auth.ServerTLS(filepath.Join(dir, "coordinator.crt"), filepath.Join(dir, "coordinator.key"), "")
	if err != nil {
		t.Fatal(err)
	}
	leaf := tlsConfig.Certificates[0].Leaf
	for _, host := range []string{"coordinator.example", "10.0.0.1"} {
		if err := leaf.VerifyHostname(host); err != nil {
			t.Error(err)
		}
	}

	for _, tt := range []struct{ flag, want string }{
		{"unlimited", `max_resources: "unlimited"`},
		{"cpus:8;mem:16384", `max_resources: "cpus:8;mem:16384"`},
	} {
		other := t.TempDir()
		root = newRootCommand(&out)
		root.SetArgs([]string{"credentials", "init", other, "--agents", "a1", "--agent-max-resources", tt.flag})
		if err := root.Execute(); err != nil {
			t.Fatalf("--agent-max-resources %s: %v", tt.flag, err)
		}
		authz, err := os.ReadFile(filepath.Join(other, "authz.yaml"))
		if err != nil || !strings.Contains(string(authz), tt.want) {
			t.Errorf("--agent-max-resources %s: authz.yaml lacks %s (%v):\n%s", tt.flag, tt.want, err, authz)
		}
		if _, err := auth.LoadPolicy(filepath.Join(other, "authz.yaml")); err != nil {
			t.Errorf("--agent-max-resources %s: %v", tt.flag, err)
		}
	}
	root = newRootCommand(&out)
	root.SetArgs([]string{"credentials", "init", t.TempDir(), "--agent-max-resources", "cpus:x"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "--agent-max-resources") {
		t.Fatalf("bad --agent-max-resources: %v", err)
	}

	root = newRootCommand(&out)
	root.SetArgs([]string{"credentials", "init", t.TempDir(), "--frameworks", "x", "--operators", "x"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "also named") {
		t.Fatalf("duplicate principal: %v", err)
	}
}

func TestCredentialsRevoke(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		root := newRootCommand(&out)
		root.SetArgs(args)
		err := root.Execute()
		return out.String(), err
	}
	if _, err := run("credentials", "init", dir, "--agents", "a1,a2", "--frameworks", "batch"); err != nil {
		t.Fatal(err)
	}
	out, err := run("credentials", "revoke", dir, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "revoked a1 (CN a1, serial ") || !strings.Contains(out, "CRL number 2") {
		t.Errorf("output %q", out)
	}
	out, err = run("credentials", "revoke", dir, "a2", "a1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "revoked a2") || !strings.Contains(out, "already revoked a1") || !strings.Contains(out, "CRL number 3") {
		t.Errorf("output %q", out)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"credentials", "revoke", dir}, "want DIR NAME..."},
		{[]string{"credentials", "revoke", dir, "a9"}, `unknown name "a9"`},
		{[]string{"credentials", "revoke", dir, "batch"}, "authz.yaml"},
		{[]string{"credentials", "revoke", t.TempDir(), "a1"}, "load the CA"},
	} {
		if _, err := run(tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want it to say %q", tt.args, err, tt.want)
		}
	}
}
