// Package privileged decides whether a test that needs root may run.
//
// Privileged tests (real cgroups, eBPF, network namespaces) skip with a
// clear message when the process is not root, so `go test ./...` works for
// anyone; but when SLACKLINE_TEST_PRIVILEGED=1 is set (CI does) a missing
// privilege is a failure, never a silent skip.
package privileged

import (
	"os"
	"testing"
)

// EnvVar is the variable that makes missing privileges fail tests.
const EnvVar = "SLACKLINE_TEST_PRIVILEGED"

// Require skips t when not running as root, or fails it when EnvVar is 1.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv(EnvVar) == "1" {
		t.Fatalf("this test needs root and %s=1 forbids skipping it", EnvVar)
	}
	t.Skipf("skipped: needs root (run as root, or set %s=1 to make this a failure)", EnvVar)
}
