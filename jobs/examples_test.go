package jobs

import (
	"os"
	"path/filepath"
	"testing"
)

// TestExamplesParse: the specs of examples/jobs are valid.
func TestExamplesParse(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../examples/jobs/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("examples: %v %v", files, err)
	}
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseSpec(text); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
