// Package imageref parses the image references a task names
// (TaskInfo.image) in skopeo's transport forms, without I/O:
//
//	docker://registry/repo:tag        a registry (distribution v2) image
//	registry/repo:tag                 the same, bare
//	registry/repo@sha256:<64 hex>     pinned by manifest digest
//	oci:/path/to/layout[:tag]         an OCI image layout directory
//	docker-archive:/path/to/file.tar  a docker save tarball ([:repo:tag] picks one image)
//
// Registry references follow github.com/google/go-containerregistry's
// name package (a bare "busybox" is index.docker.io/library/busybox:latest).
// Paths must be absolute and clean. The coordinator validates a task's
// image with Parse at Accept; the agent parses it again before pulling.
//
// Errors name the field and say what form was expected; every error
// wraps ErrInvalid.
package imageref

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/google/go-containerregistry/pkg/name"
)

// MaxLength bounds a reference's length in bytes.
const MaxLength = 4096

// ErrInvalid is wrapped by every parse error.
var ErrInvalid = errors.New("invalid image reference")

// Transport is where an image comes from.
type Transport string

// The transports Parse accepts, named as skopeo names them.
const (
	Registry      Transport = "docker"
	OCILayout     Transport = "oci"
	DockerArchive Transport = "docker-archive"
)

// Ref is a parsed image reference.
type Ref struct {
	Transport Transport
	// Name is the registry reference (Registry), or the image's name
	// within an archive when one was given (DockerArchive), else nil.
	Name name.Reference
	// Path is the layout directory or archive file (OCILayout, DockerArchive).
	Path string
	// Tag is the layout's image name annotation (OCILayout), or "".
	Tag string
}

// Local reports whether the image is read from the agent's own
// filesystem (a layout or an archive) rather than a registry.
func (r Ref) Local() bool { return r.Transport == OCILayout || r.Transport == DockerArchive }

// Digest is the manifest digest the reference pins ("sha256:..."), or "".
func (r Ref) Digest() string {
	if d, ok := r.Name.(name.Digest); ok && r.Transport == Registry {
		return d.DigestStr()
	}
	return ""
}

// String is the canonical form: docker://<full name>, oci:<path>[:tag],
// docker-archive:<path>[:name].
func (r Ref) String() string {
	switch r.Transport {
	case Registry:
		return "docker://" + r.Name.Name()
	case OCILayout:
		if r.Tag != "" {
			return "oci:" + r.Path + ":" + r.Tag
		}
		return "oci:" + r.Path
	case DockerArchive:
		if r.Name != nil {
			return "docker-archive:" + r.Path + ":" + r.Name.Name()
		}
		return "docker-archive:" + r.Path
	}
	return ""
}

// Parse reads s as one of the forms in the package comment.
func Parse(s string) (Ref, error) {
	if s == "" {
		return Ref{}, fmt.Errorf("%w: empty", ErrInvalid)
	}
	if len(s) > MaxLength {
		return Ref{}, fmt.Errorf("%w: %d bytes, at most %d", ErrInvalid, len(s), MaxLength)
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return Ref{}, fmt.Errorf("%w: %q contains %q", ErrInvalid, s, r)
		}
	}
	transport, rest, found := strings.Cut(s, ":")
	if found {
		switch transport {
		case "docker":
			if !strings.HasPrefix(rest, "//") {
				return Ref{}, fmt.Errorf("%w: %q: the docker transport is docker://registry/repo:tag", ErrInvalid, s)
			}
			return registry(s, strings.TrimPrefix(rest, "//"))
		case "oci":
			path, tag := splitPath(rest)
			if err := checkPath(s, path); err != nil {
				return Ref{}, err
			}
			if tag != "" && strings.ContainsAny(tag, "/:@") {
				return Ref{}, fmt.Errorf("%w: %q: layout image name %q may not contain '/', ':' or '@'", ErrInvalid, s, tag)
			}
			return Ref{Transport: OCILayout, Path: path, Tag: tag}, nil
		case "docker-archive":
			path, inner, _ := strings.Cut(rest, ":")
			if err := checkPath(s, path); err != nil {
				return Ref{}, err
			}
			ref := Ref{Transport: DockerArchive, Path: path}
			if inner != "" {
				n, err := name.ParseReference(inner)
				if err != nil {
					return Ref{}, fmt.Errorf("%w: %q: image name in the archive: %v", ErrInvalid, s, err)
				}
				ref.Name = n
			}
			return ref, nil
		case "oci-archive", "dir", "containers-storage", "docker-daemon", "sif", "ostree":
			return Ref{}, fmt.Errorf("%w: %q: transport %q is not supported (docker://, oci:, docker-archive: or a bare registry/repo:tag)", ErrInvalid, s, transport)
		}
	}
	return registry(s, s)
}

func registry(s, ref string) (Ref, error) {
	n, err := name.ParseReference(ref)
	if err != nil {
		return Ref{}, fmt.Errorf("%w: %q: %v", ErrInvalid, s, err)
	}
	return Ref{Transport: Registry, Name: n}, nil
}

// splitPath splits "path[:tag]": the tag is what follows the last ':'
// after the last '/'.
func splitPath(s string) (path, tag string) {
	slash := strings.LastIndex(s, "/")
	if colon := strings.LastIndex(s, ":"); colon > slash {
		return s[:colon], s[colon+1:]
	}
	return s, ""
}

func checkPath(s, path string) error {
	switch {
	case path == "":
		return fmt.Errorf("%w: %q: no path", ErrInvalid, s)
	case !filepath.IsAbs(path):
		return fmt.Errorf("%w: %q: path %q is not absolute", ErrInvalid, s, path)
	case filepath.Clean(path) != path:
		return fmt.Errorf("%w: %q: path %q is not clean (want %q)", ErrInvalid, s, path, filepath.Clean(path))
	}
	return nil
}
