package images

import (
	"github.com/google/go-containerregistry/pkg/authn"
	"golang.org/x/sys/unix"
)

type authnConfig = authn.AuthConfig

type unixStat struct{ unix.Stat_t }

func (s unixStat) isWhiteout() bool { return s.Mode&unix.S_IFMT == unix.S_IFCHR && s.Rdev == 0 }

func lstat(path string, st *unixStat) error { return unix.Lstat(path, &st.Stat_t) }

func getxattr(path, name string) (string, error) {
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(path, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
