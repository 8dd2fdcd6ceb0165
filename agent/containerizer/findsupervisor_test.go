package containerizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestFindSupervisor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	executable := write("slackline-supervisor", 0o755)
	notExecutable := write("plain", 0o644)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	besideTest := filepath.Join(filepath.Dir(exe), SupervisorBinary)
	for _, tc := range []struct {
		name, path string
		want       []string
		errHas     []string // substrings of the error; nil: no error
	}{
		{"flag names an executable", executable, []string{executable}, nil},
		{"flag names a missing file", filepath.Join(dir, "missing"), nil, []string{filepath.Join(dir, "missing"), "--supervisor", "no such file"}},
		{"flag names a file without x bits", notExecutable, nil, []string{notExecutable, "not an executable file"}},
		{"flag names a directory", dir, nil, []string{dir, "not an executable file"}},
		// The test binary's directory has no slackline-supervisor.
		{"default: next to this executable", "", nil, []string{besideTest, "next to " + exe, "--supervisor"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FindSupervisor(tc.path)
			if tc.errHas == nil {
				if err != nil || !slices.Equal(got, tc.want) {
					t.Fatalf("FindSupervisor(%q) = %q, %v; want %q", tc.path, got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("FindSupervisor(%q) = %q; want an error", tc.path, got)
			}
			for _, s := range tc.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("FindSupervisor(%q) error %q does not name %q", tc.path, err, s)
				}
			}
		})
	}
}

// A relative --supervisor is made absolute: supervisors start in other
// working directories.
func TestFindSupervisorRelative(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, SupervisorBinary), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	got, err := FindSupervisor(SupervisorBinary)
	if err != nil || len(got) != 1 || got[0] != filepath.Join(dir, SupervisorBinary) {
		t.Fatalf("FindSupervisor(%q) = %q, %v; want [%s]", SupervisorBinary, got, err, filepath.Join(dir, SupervisorBinary))
	}
}
