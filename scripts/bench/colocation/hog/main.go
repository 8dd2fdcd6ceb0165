// Command hog is the colocation benchmark's best-effort task. By default it
// is the memory-bandwidth hog: it copies one buffer into another, back and
// forth, forever. With buffers much larger than the last-level cache every
// copy streams through main memory, so it competes with its neighbours for
// memory bandwidth and evicts their cache lines whatever CPU it runs on.
//
// With --write FILE it is the disk writer: --depth threads write --mib MiB
// blocks with O_DIRECT, in turn over a file of --file-mib MiB, forever. The
// blocks come from one page-aligned buffer written once, so a byte costs
// no CPU (no copy from /dev/zero as dd does): at idle CPU priority on a
// loaded machine the writer is still bound by the disk, not by the CPU it
// cannot get, and several writes in flight keep the disk busy while a
// thread waits for a CPU.
package main

import (
	"flag"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func main() {
	mib := flag.Int("mib", 512, "size of each of the two buffers (with --write: of each write), MiB")
	write := flag.String("write", "", "write this file with O_DIRECT instead of copying memory")
	fileMiB := flag.Int("file-mib", 256, "with --write: the file's size, MiB (a multiple of --mib)")
	depth := flag.Int("depth", 4, "with --write: writes in flight")
	flag.Parse()
	if *mib <= 0 {
		fmt.Fprintln(os.Stderr, "hog: --mib must be positive")
		os.Exit(2)
	}
	if *write != "" {
		if err := writer(*write, *mib, *fileMiB, *depth); err != nil {
			fmt.Fprintln(os.Stderr, "hog:", err)
			os.Exit(1)
		}
		return
	}
	src, dst := make([]byte, *mib<<20), make([]byte, *mib<<20)
	for i := range src {
		src[i] = byte(i) // touch every page, so the buffers are resident
	}
	for {
		copy(dst, src)
		src, dst = dst, src
	}
}

// writer writes blocks of mib MiB with O_DIRECT over a file of fileMiB MiB,
// depth at a time, until a write fails.
func writer(path string, mib, fileMiB, depth int) error {
	if fileMiB < mib || fileMiB%mib != 0 {
		return fmt.Errorf("--file-mib %d must be a positive multiple of --mib %d", fileMiB, mib)
	}
	if depth < 1 {
		return fmt.Errorf("--depth must be positive, got %d", depth)
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_DIRECT, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	// Page-aligned, as O_DIRECT needs; filled once so the pages exist.
	buf, err := unix.Mmap(-1, 0, mib<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	for i := range buf {
		buf[i] = byte(i)
	}
	blocks := fileMiB / mib
	errs := make(chan error, depth)
	for t := range depth {
		go func() {
			for k := t; ; k += depth {
				off := int64(k%blocks) * int64(mib) << 20
				if _, err := unix.Pwrite(fd, buf, off); err != nil {
					errs <- fmt.Errorf("write %s at %d: %w", path, off, err)
					return
				}
			}
		}()
	}
	return <-errs
}
