package imageref

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	digest := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		in        string
		transport Transport
		canonical string
		path, tag string
		digest    string
		local     bool
		err       string // substring; "" = valid
	}{
		{in: "127.0.0.1:5000/app:v1", transport: Registry, canonical: "docker://127.0.0.1:5000/app:v1"},
		{in: "docker://127.0.0.1:5000/app:v1", transport: Registry, canonical: "docker://127.0.0.1:5000/app:v1"},
		{in: "busybox", transport: Registry, canonical: "docker://index.docker.io/library/busybox:latest"},
		{in: "registry.example/team/app@" + digest, transport: Registry, canonical: "docker://registry.example/team/app@" + digest, digest: digest},
		{in: "docker://registry.example/app@" + digest, transport: Registry, canonical: "docker://registry.example/app@" + digest, digest: digest},
		{in: "oci:/srv/images/app", transport: OCILayout, canonical: "oci:/srv/images/app", path: "/srv/images/app", local: true},
		{in: "oci:/srv/images/app:v2", transport: OCILayout, canonical: "oci:/srv/images/app:v2", path: "/srv/images/app", tag: "v2", local: true},
		{in: "docker-archive:/srv/app.tar", transport: DockerArchive, canonical: "docker-archive:/srv/app.tar", path: "/srv/app.tar", local: true},
		{in: "docker-archive:/srv/app.tar:app:v1", transport: DockerArchive, canonical: "docker-archive:/srv/app.tar:index.docker.io/library/app:v1", path: "/srv/app.tar", local: true},

		{in: "", err: "empty"},
		{in: strings.Repeat("a", MaxLength+1), err: "at most"},
		{in: "app :v1", err: "contains"},
		{in: "app\n:v1", err: "contains"},
		{in: "docker:registry/app", err: "docker://"},
		{in: "registry.example/app@sha256:abc", err: "invalid image reference"},
		{in: "UPPER/Case", err: "invalid image reference"},
		{in: "oci:relative/dir", err: "not absolute"},
		{in: "oci:", err: "no path"},
		{in: "oci:/srv/../etc", err: "not clean"},
		{in: "docker-archive:", err: "no path"},
		{in: "docker-archive:app.tar", err: "not absolute"},
		{in: "docker-archive:/srv/app.tar:Bad Name", err: "contains"},
		{in: "containers-storage:app", err: "not supported"},
		{in: "dir:/srv/app", err: "not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			ref, err := Parse(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("Parse(%q) = %v, %v; want an ErrInvalid containing %q", tt.in, ref, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if ref.Transport != tt.transport || ref.String() != tt.canonical || ref.Path != tt.path ||
				ref.Tag != tt.tag || ref.Digest() != tt.digest || ref.Local() != tt.local {
				t.Errorf("Parse(%q) = {%s %s path=%q tag=%q digest=%q local=%v}, want {%s %s path=%q tag=%q digest=%q local=%v}",
					tt.in, ref.Transport, ref, ref.Path, ref.Tag, ref.Digest(), ref.Local(),
					tt.transport, tt.canonical, tt.path, tt.tag, tt.digest, tt.local)
			}
			// The canonical form parses to itself.
			again, err := Parse(ref.String())
			if err != nil || again.String() != ref.String() {
				t.Errorf("Parse(%q) = %v, %v; want the same reference", ref.String(), again, err)
			}
		})
	}
}
