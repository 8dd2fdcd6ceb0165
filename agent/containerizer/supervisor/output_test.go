package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRotatingOutputKeepsTheNewest writes a long stream in chunks of
// assorted sizes: at most the limit stays on disk, in two halves, and it
// is the end of the stream.
func TestRotatingOutputKeepsTheNewest(t *testing.T) {
	const limit = 100
	for _, chunk := range []int{1, 7, 49, 50, 51, 333} {
		t.Run(fmt.Sprint("chunk ", chunk), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "stdout")
			if err := os.WriteFile(path, nil, 0o640); err != nil {
				t.Fatal(err)
			}
			// A link the task planted where the older half goes is
			// replaced, not followed.
			victim := filepath.Join(dir, "victim")
			os.WriteFile(victim, []byte("keep"), 0o644)
			os.Symlink(victim, path+".1")
			out, err := openRotatingOutput(path, limit, os.Getuid(), os.Getgid())
			if err != nil {
				t.Fatal(err)
			}
			var stream bytes.Buffer
			for i := 0; stream.Len() < 2000; i++ {
				p := []byte(strings.Repeat(string(rune('a'+i%26)), chunk))
				stream.Write(p)
				if n, err := out.Write(p); n != len(p) || err != nil {
					t.Fatalf("write: %d, %v", n, err)
				}
			}
			out.Close()
			newer, _ := os.ReadFile(path)
			older, _ := os.ReadFile(path + ".1")
			kept := append(older, newer...)
			if len(newer) > limit/2 || len(older) > limit/2 || !bytes.HasSuffix(stream.Bytes(), kept) || len(kept) < limit/2 {
				t.Errorf("kept %d+%d bytes %q, want at most %d of the stream's end", len(older), len(newer), kept, limit)
			}
			if b, _ := os.ReadFile(victim); string(b) != "keep" {
				t.Errorf("the link's target was written: %q", b)
			}
		})
	}
}
