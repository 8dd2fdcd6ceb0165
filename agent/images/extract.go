package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/internal/unpack"
)

// Whiteout names of the OCI image layer format.
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// overlayOpaque is the xattr overlayfs reads on a directory of an upper
// or lower layer that hides the same directory of the layers below.
const overlayOpaque = "trusted.overlay.opaque"

// entryOverhead is what each non-regular entry counts towards a layer's
// unpacked size (an inode and a directory entry, roughly a block).
const entryOverhead = 512

// extractLayer unpacks an uncompressed layer tarball into dir (which
// must exist and be empty) as an overlayfs lower directory, and returns
// the bytes it counts for the layer (file contents plus entryOverhead per
// other entry).
//
// Whiteouts become what overlayfs reads: ".wh.<name>" a character device
// 0:0 named <name>, ".wh..wh..opq" the trusted.overlay.opaque xattr "y"
// on its directory. Every operation goes through an os.Root at dir, so no
// entry name and no symbolic link in the layer reaches outside dir;
// names with a ".." component are refused outright, hard links must name
// an entry inside dir. Owners, modes (setuid bits included; the overlay
// is mounted with the task's no_new_privs) and symbolic links are kept
// as they are; device nodes are skipped (the root is mounted nodev).
func extractLayer(r io.Reader, dir string) (int64, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	var size int64
	err = unpack.Tar(r, func(hdr *tar.Header, body io.Reader) error {
		n, err := extractEntry(root, hdr, body)
		size += n
		return err
	})
	return size, err
}

// extractEntry unpacks one entry of a layer and returns the bytes it
// counts.
func extractEntry(root *os.Root, hdr *tar.Header, body io.Reader) (int64, error) {
	name, err := entryName(hdr.Name)
	if err != nil {
		return 0, err
	}
	if name == "." {
		return 0, nil // the layer's root directory: its attributes are the overlay's business
	}
	size := int64(entryOverhead)
	if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
		return size, fmt.Errorf("layer entry %q: create parent: %w", hdr.Name, err)
	}
	base := path.Base(name)
	if base == whiteoutOpaque {
		if err := setOpaque(root, path.Dir(name)); err != nil {
			return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		return size, nil
	}
	if hidden, ok := strings.CutPrefix(base, whiteoutPrefix); ok {
		if hidden == "" || hidden == "." || hidden == ".." {
			return size, fmt.Errorf("layer entry %q: whiteout of nothing", hdr.Name)
		}
		if err := whiteout(root, path.Join(path.Dir(name), hidden)); err != nil {
			return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		return size, nil
	}
	mode := fs.FileMode(hdr.Mode & 0o777)
	if hdr.Mode&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if hdr.Mode&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if hdr.Mode&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		if st, err := root.Lstat(name); err != nil || !st.IsDir() {
			return size, fmt.Errorf("layer entry %q: not a directory in the layer", hdr.Name)
		}
	case tar.TypeReg: // archive/tar reads old writers' TypeRegA as TypeReg
		if err := replace(root, name); err != nil {
			return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		n, err := io.Copy(f, body)
		err = errors.Join(err, f.Close())
		if err != nil {
			return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		size += n
	case tar.TypeSymlink:
		if err := replace(root, name); err != nil {
			return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
	case tar.TypeLink:
		target, err := entryName(hdr.Linkname)
		if err != nil {
			return size, fmt.Errorf("layer entry %q: link target: %w", hdr.Name, err)
		}
		if err := replace(root, name); err != nil {
			return size, fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		if err := root.Link(target, name); err != nil {
			return size, fmt.Errorf("layer entry %q: hard link to %q: %w", hdr.Name, hdr.Linkname, err)
		}
		return size, nil // the target's owner and mode are the link's
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return size, nil
	default:
		return size, nil // extended headers are read by archive/tar; others carry nothing a root needs
	}
	if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
		return size, fmt.Errorf("layer entry %q: chown %d:%d: %w", hdr.Name, hdr.Uid, hdr.Gid, err)
	}
	if hdr.Typeflag != tar.TypeSymlink {
		// After chown, which clears setuid bits.
		if err := root.Chmod(name, mode); err != nil {
			return size, fmt.Errorf("layer entry %q: chmod: %w", hdr.Name, err)
		}
	}
	return size, nil
}

// entryName cleans a tar entry's name to a path relative to the layer's
// root ("." for the root), refusing any ".." component (unpack.CleanName).
func entryName(name string) (string, error) {
	clean, err := unpack.CleanName(name)
	if err != nil {
		return "", fmt.Errorf("layer entry: %w", err)
	}
	return clean, nil
}

// replace removes what a later entry of the same layer replaces (not a
// directory: a directory entry over a directory merges).
func replace(root *os.Root, name string) error {
	st, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.IsDir() {
		return root.RemoveAll(name)
	}
	return root.Remove(name)
}

// whiteout records that name, present in a lower layer, is deleted: a
// character device 0:0, as overlayfs reads it.
func whiteout(root *os.Root, name string) error {
	if err := replace(root, name); err != nil {
		return err
	}
	parent, err := root.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer parent.Close()
	if err := unix.Mknodat(int(parent.Fd()), path.Base(name), unix.S_IFCHR, int(unix.Mkdev(0, 0))); err != nil {
		return fmt.Errorf("whiteout %s: %w", name, err)
	}
	return nil
}

// setOpaque marks dir as hiding the same directory of the layers below.
func setOpaque(root *os.Root, dir string) error {
	f, err := root.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fsetxattr(int(f.Fd()), overlayOpaque, []byte("y"), 0); err != nil {
		return fmt.Errorf("mark %s opaque: %w", dir, err)
	}
	return nil
}
