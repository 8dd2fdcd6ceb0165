package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRegistrySurvivesSIGKILL runs writers in a child process (this test
// binary again) on the registry (Open: bbolt, group commit), SIGKILLs it in
// the middle of their writes, and checks after each of several rounds that
// every write the child had acknowledged (printed once Apply returned) is
// in registry.db, and every acknowledged delete took effect. The first
// round starts from a registry.log, which the child imports.
//
// The registry lives on a memory file system where there is one (memDir):
// what survives a SIGKILL is what the child wrote to the kernel before it
// acknowledged, on any file system (the kernel, not the process, holds
// the pages), so a disk adds only fsync's cost to the test, not meaning.
func TestRegistrySurvivesSIGKILL(t *testing.T) {
	if dir := os.Getenv("STORE_CRASH_DIR"); dir != "" {
		crashChild(dir, os.Getenv("STORE_CRASH_ROUND"))
		return
	}
	t.Parallel()
	dir := memDir(t)
	imported := bigLog(t, dir)
	want := map[string]string{} // acknowledged, over every round
	for round := range 4 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRegistrySurvivesSIGKILL$", "-test.count=1")
		cmd.Env = append(os.Environ(), "STORE_CRASH_DIR="+dir, fmt.Sprint("STORE_CRASH_ROUND=", round))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		// Kill after a number of acknowledgements that differs by round,
		// so that the kill lands at different points of the writes.
		for acked := 0; acked < 300+137*round && lines.Scan(); acked++ {
			ack(want, lines.Text())
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		for lines.Scan() { // acknowledged before the kill landed
			ack(want, lines.Text())
		}
		cmd.Wait()

		s, err := Open(dir, time.Second, nil)
		if err != nil {
			t.Fatalf("round %d: open after SIGKILL: %v", round, err)
		}
		got, err := s.Load(context.Background(), BucketAgents)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range want {
			switch {
			case v == "":
				if _, ok := got[k]; ok {
					t.Errorf("round %d: %s deleted (acknowledged) but present", round, k)
				}
			case string(got[k]) == v:
			case got[k] == nil && deleteInFlight(want, k):
				// Its delete was under way when the child was killed:
				// durable or not, both are right.
			default:
				t.Errorf("round %d: %s = %q, acknowledged %q", round, k, got[k], v)
			}
		}
		frameworks := map[string]map[string]string{BucketFrameworks: imported[BucketFrameworks]}
		if diff := cmp.Diff(frameworks, load(t, s, frameworks)); diff != "" {
			t.Errorf("round %d: the records imported from registry.log (-want +got):\n%s", round, diff)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if len(want) < 1000 {
		t.Fatalf("only %d writes acknowledged in all: the child did not write", len(want))
	}
}

// deleteInFlight reports whether the child may have been deleting key when
// it was killed: a writer deletes its write i-3 once write i is
// acknowledged, for i = 4, 9, 14...
func deleteInFlight(want map[string]string, key string) bool {
	cut := strings.LastIndex(key, "-")
	var i int
	if _, err := fmt.Sscan(key[cut+1:], &i); err != nil || i%5 != 1 {
		return false
	}
	_, next := want[fmt.Sprintf("%s-%d", key[:cut], i+3)]
	return next
}

// ack records an acknowledged write: "+key value" or "-key".
func ack(want map[string]string, line string) {
	if key, ok := strings.CutPrefix(line, "-"); ok {
		want[key] = ""
		return
	}
	key, value, _ := strings.Cut(strings.TrimPrefix(line, "+"), " ")
	want[key] = value
}

// crashChild writes from 8 goroutines until killed, and prints each write
// once Apply returned.
func crashChild(dir, round string) {
	l, err := Open(dir, time.Second, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	say := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(w, line)
		w.Flush()
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				key := fmt.Sprintf("r%s-g%d-%d", round, g, i)
				value := fmt.Sprintf("%s:%s", key, strings.Repeat("v", 50+i%200))
				if err := l.Apply(context.Background(), Put(BucketAgents, key, []byte(value))); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				say("+" + key + " " + value)
				if i%5 == 4 { // delete an earlier write of this goroutine
					old := fmt.Sprintf("r%s-g%d-%d", round, g, i-3)
					if err := l.Apply(context.Background(), Delete(BucketAgents, old)); err != nil {
						fmt.Fprintln(os.Stderr, err)
						os.Exit(1)
					}
					say("-" + old)
				}
			}
		})
	}
	wg.Wait()
}

// memDir returns a new directory on /dev/shm (tmpfs), removed with the
// test, or t.TempDir() where there is no /dev/shm.
func memDir(t *testing.T) string {
	t.Helper()
	if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "slackline-store-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
