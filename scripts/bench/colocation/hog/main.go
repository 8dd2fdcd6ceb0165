// Command hog is the colocation benchmark's memory-bandwidth best-effort
// task: it copies one buffer into another, back and forth, forever. With
// buffers much larger than the last-level cache every copy streams through
// main memory, so it competes with its neighbours for memory bandwidth and
// evicts their cache lines whatever CPU it runs on.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	mib := flag.Int("mib", 512, "size of each of the two buffers, MiB")
	flag.Parse()
	if *mib <= 0 {
		fmt.Fprintln(os.Stderr, "hog: --mib must be positive")
		os.Exit(2)
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
