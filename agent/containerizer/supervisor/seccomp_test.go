package supervisor

import "testing"

// TestSeccompFilterAssembles: the filter builds for this architecture and
// denies what the package documentation says.
func TestSeccompFilterAssembles(t *testing.T) {
	t.Parallel()
	f, err := seccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	if len(f.policy) < 20 || len(f.abi) != 4 {
		t.Errorf("filters of %d and %d instructions", len(f.policy), len(f.abi))
	}
}
