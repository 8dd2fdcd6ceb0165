// Package unpack is what the agent's two archive readers share: the
// artifact fetcher (agent/fetcher: tar, tar.gz and zip into a sandbox) and
// the image store (agent/images: layer tarballs into overlayfs lower
// directories). Each keeps its own rules for what an entry becomes; the
// name check and the tar loop are here, once.
package unpack

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// ErrName is wrapped by CleanName's errors.
var ErrName = errors.New("archive entry name refused")

// CleanName returns an archive entry's name as a clean path relative to
// the directory it is unpacked into ("." for that directory itself). A
// name with a ".." component or a NUL byte is refused, whatever it would
// resolve to: an archive that names one is broken or hostile. A leading
// "/" or "./" is dropped (layers carry both); callers that must refuse
// absolute names check them first.
func CleanName(name string) (string, error) {
	if strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%w: %q holds a NUL byte", ErrName, name)
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: %q: path traversal (a \"..\" component)", ErrName, name)
		}
	}
	clean := path.Clean("/" + name)
	if clean == "/" {
		return ".", nil
	}
	return clean[1:], nil
}

// Tar calls each for every entry of the tar stream r, with the entry's
// content as body, until the end of the stream or each's first error.
// Errors reading the stream are wrapped with "tar: ".
func Tar(r io.Reader, each func(hdr *tar.Header, body io.Reader) error) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("tar: %w", err)
		}
		if err := each(hdr, tr); err != nil {
			return err
		}
	}
}
