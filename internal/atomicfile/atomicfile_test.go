package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	for name, write := range map[string]func(string, []byte, os.FileMode) error{"WriteFile": WriteFile, "ReplaceFile": ReplaceFile} {
		t.Run(name, func(t *testing.T) { testWrite(t, write) })
	}
}

// testWrite checks what WriteFile and ReplaceFile share: the content
// replaced whole, the mode, no temporary left, an error for a missing
// directory.
func testWrite(t *testing.T, write func(string, []byte, os.FileMode) error) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, content := range []string{"first\n", "second, longer\n"} {
		if err := write(path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
		info, err := os.Stat(path)
		if err != nil || info.Mode().Perm() != 0o640 {
			t.Fatalf("mode %v, %v; want 0640", info.Mode().Perm(), err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Errorf("directory holds %v (%v); want the file alone, no temporary left", entries, err)
	}
	if err := write(filepath.Join(dir, "missing", "x"), []byte("x"), 0o600); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}
