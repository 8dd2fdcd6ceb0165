package unpack

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestCleanName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, want string
		refused    bool
	}{
		{"a/b", "a/b", false},
		{"./a/b/", "a/b", false},
		{"/etc/passwd", "etc/passwd", false},
		{"a//b/./c", "a/b/c", false},
		{".", ".", false},
		{"./", ".", false},
		{"/", ".", false},
		{"../x", "", true},
		{"a/../../x", "", true},
		{"a/..", "", true},
		{"a\x00b", "", true},
	}
	for _, tt := range tests {
		got, err := CleanName(tt.name)
		if tt.refused {
			if !errors.Is(err, ErrName) {
				t.Errorf("CleanName(%q) = %q, %v; want refused", tt.name, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("CleanName(%q) = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

func TestTar(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct{ name, body string }{{"a", "1"}, {"b", "22"}, {"c", "333"}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var seen []string
	err := Tar(bytes.NewReader(buf.Bytes()), func(hdr *tar.Header, body io.Reader) error {
		b, err := io.ReadAll(body)
		seen = append(seen, hdr.Name+"="+string(b))
		return err
	})
	if err != nil || strings.Join(seen, ",") != "a=1,b=22,c=333" {
		t.Errorf("Tar read %v, %v", seen, err)
	}
	stop := errors.New("stop")
	n := 0
	if err := Tar(bytes.NewReader(buf.Bytes()), func(*tar.Header, io.Reader) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Errorf("Tar after an error: %v after %d entries, want stop after 1", err, n)
	}
	if err := Tar(strings.NewReader(strings.Repeat("x", 1000)), func(*tar.Header, io.Reader) error { return nil }); err == nil || !strings.HasPrefix(err.Error(), "tar: ") {
		t.Errorf("Tar of garbage: %v, want a tar: error", err)
	}
}
