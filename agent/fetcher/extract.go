package fetcher

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"

	"github.com/slackline/slackline/internal/taskspec"
	"github.com/slackline/slackline/internal/unpack"
)

// extractor writes files into a sandbox through an os.Root, so that no
// name and no symbolic link can lead outside it, owned by the task's user,
// within a byte and an entry budget.
type extractor struct {
	root    *os.Root
	owner   Owner
	budget  int64 // bytes still allowed
	entries int   // entries still allowed
}

// extract unpacks the archive in file into dest (a directory relative to
// the sandbox, "." for the sandbox itself).
func (x *extractor) extract(file *os.File, format, dest string) error {
	if dest != "." {
		if err := x.mkdirAll(dest, 0o755); err != nil {
			return err
		}
	}
	switch format {
	case taskspec.ExtractTar:
		return x.tar(file, dest)
	case taskspec.ExtractTarGz:
		gz, err := gzip.NewReader(file)
		if err != nil {
			return fmt.Errorf("gzip: %w", err)
		}
		defer gz.Close()
		return x.tar(gz, dest)
	case taskspec.ExtractZip:
		info, err := file.Stat()
		if err != nil {
			return err
		}
		return x.zip(file, info.Size(), dest)
	}
	return fmt.Errorf("unknown archive format %q", format)
}

// entryName is where an archive entry lands, relative to the sandbox, or
// an error for a name that is absolute or has a ".." component
// (unpack.CleanName). "" is the destination itself.
func entryName(dest, name string) (string, error) {
	if path.IsAbs(name) {
		return "", fmt.Errorf("entry %q: absolute names are refused", name)
	}
	clean, err := unpack.CleanName(name)
	if err != nil {
		return "", err
	}
	if clean == "." {
		return "", nil
	}
	return path.Join(dest, clean), nil
}

// linkInside reports whether a symbolic link at name (relative to the
// sandbox) with target stays inside the sandbox.
func linkInside(name, target string) bool {
	if target == "" || path.IsAbs(target) {
		return false
	}
	resolved := path.Join(path.Dir(name), target)
	return resolved != ".." && !strings.HasPrefix(resolved, "../")
}

func (x *extractor) take() error {
	if x.entries <= 0 {
		return errors.New("too many entries")
	}
	x.entries--
	return nil
}

func (x *extractor) tar(r io.Reader, dest string) error {
	return unpack.Tar(r, func(hdr *tar.Header, body io.Reader) error {
		if err := x.take(); err != nil {
			return err
		}
		name, err := entryName(dest, hdr.Name)
		if err != nil {
			return err
		}
		mode := hdr.FileInfo().Mode().Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name != "" {
				return x.mkdirAll(name, mode)
			}
		case tar.TypeReg:
			return x.writeFile(name, body, mode)
		case tar.TypeSymlink:
			return x.symlink(name, hdr.Linkname)
		case tar.TypeLink:
			old, err := entryName(dest, hdr.Linkname)
			if err != nil {
				return err
			}
			return x.link(name, old)
		case tar.TypeXGlobalHeader, tar.TypeXHeader, tar.TypeGNULongName, tar.TypeGNULongLink:
			// Metadata the reader already applied.
		default:
			return fmt.Errorf("entry %q: type %q (device, fifo, ...) refused", hdr.Name, hdr.Typeflag)
		}
		return nil
	})
}

func (x *extractor) zip(r io.ReaderAt, size int64, dest string) error {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return fmt.Errorf("zip: %w", err)
	}
	for _, f := range zr.File {
		if err := x.take(); err != nil {
			return err
		}
		name, err := entryName(dest, f.Name)
		if err != nil {
			return err
		}
		mode := f.Mode()
		switch {
		case mode.IsDir():
			if name != "" {
				err = x.mkdirAll(name, mode.Perm())
			}
		case mode&fs.ModeSymlink != 0:
			var target []byte
			if target, err = readSmall(f); err == nil {
				err = x.symlink(name, string(target))
			}
		case mode.IsRegular():
			var rc io.ReadCloser
			if rc, err = f.Open(); err == nil {
				err = x.writeFile(name, rc, mode.Perm())
				rc.Close()
			}
		default:
			err = fmt.Errorf("entry %q: mode %v refused", f.Name, mode)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func readSmall(f *zip.File) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 4097))
	if len(b) > 4096 {
		return nil, fmt.Errorf("entry %q: link target too long", f.Name)
	}
	return b, err
}

// mkdirAll creates name and its missing parents, owned by the task's user.
func (x *extractor) mkdirAll(name string, mode fs.FileMode) error {
	mode |= 0o700 // its owner can always enter and fill it
	dir := ""
	for _, elem := range strings.Split(name, "/") {
		dir = path.Join(dir, elem)
		err := x.root.Mkdir(dir, mode)
		if errors.Is(err, fs.ErrExist) {
			info, statErr := x.root.Stat(dir)
			if statErr != nil {
				return statErr
			}
			if !info.IsDir() {
				return fmt.Errorf("%q exists and is not a directory", dir)
			}
			continue
		}
		if err != nil {
			return err
		}
		if err := errors.Join(x.root.Lchown(dir, x.owner.UID, x.owner.GID), x.root.Chmod(dir, mode)); err != nil {
			return err
		}
	}
	return nil
}

// writeFile creates name (it must not exist) with r's content, within the
// byte budget.
func (x *extractor) writeFile(name string, r io.Reader, mode fs.FileMode) error {
	if name == "" {
		return errors.New("a file entry without a name")
	}
	if dir := path.Dir(name); dir != "." {
		if err := x.mkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	f, err := x.root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(r, x.budget+1))
	x.budget -= n
	if err == nil && x.budget < 0 {
		err = fmt.Errorf("%w: %q goes beyond the size limit", errTooLarge, name)
	}
	// setuid, setgid and sticky bits are dropped: mode is Perm() only.
	err = errors.Join(err, f.Chown(x.owner.UID, x.owner.GID), f.Chmod(mode.Perm()), f.Close())
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

func (x *extractor) symlink(name, target string) error {
	if name == "" || !linkInside(name, target) {
		return fmt.Errorf("link %q -> %q leaves the sandbox: refused", name, target)
	}
	if dir := path.Dir(name); dir != "." {
		if err := x.mkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	if err := x.root.Symlink(target, name); err != nil {
		return err
	}
	return x.root.Lchown(name, x.owner.UID, x.owner.GID)
}

func (x *extractor) link(name, old string) error {
	if name == "" || old == "" {
		return fmt.Errorf("hard link %q -> %q refused", name, old)
	}
	if dir := path.Dir(name); dir != "." {
		if err := x.mkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	// os.Root resolves old inside the sandbox: a link to a file outside
	// cannot be made.
	return x.root.Link(old, name)
}
