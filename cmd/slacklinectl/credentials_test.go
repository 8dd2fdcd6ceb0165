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
		"agent-a2.crt", "agent-a2.key", "batch.token", "service.token", "admin.token", "authz.yaml"} {
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

	root = newRootCommand(&out)
	root.SetArgs([]string{"credentials", "init", t.TempDir(), "--frameworks", "x", "--operators", "x"})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "also named") {
		t.Fatalf("duplicate principal: %v", err)
	}
}
