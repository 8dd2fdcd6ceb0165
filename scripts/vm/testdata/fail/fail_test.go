// Package fail is a fixture of scripts/vm/harness_test.go: a package with a
// failing test among passing ones, run by scripts/vm/test, whose failure
// digest must name the test and show the output before its FAIL line.
package fail

import (
	"fmt"
	"os"
	"testing"
)

func fixture(t *testing.T) {
	if os.Getenv("SLACKLINE_VM_HARNESS_FIXTURE") != "1" {
		t.Skip("a fixture of scripts/vm/harness_test.go, run by scripts/vm/test there")
	}
}

func TestBefore(t *testing.T) { fixture(t) }

func TestFails(t *testing.T) {
	fixture(t)
	for i := 1; i <= 60; i++ {
		fmt.Printf("fixture output line %d\n", i)
	}
	t.Error("the fixture's failure message")
}

func TestAfter(t *testing.T) {
	fixture(t)
	for i := 1; i <= 100; i++ {
		fmt.Printf("later output line %d\n", i)
	}
}
