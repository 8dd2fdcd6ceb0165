package kv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slackline/slackline/internal/filelock"
)

// logFile makes a log at a new path with two writes, then a third whose
// frame is the file's last, and returns the path and the third frame's
// offset.
func logFile(t *testing.T) (path string, lastFrame int64) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "registry.log")
	ctx := context.Background()
	l, err := OpenLog(path, LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Apply(ctx, Put("agents", "a1", []byte("one")), Put("agents", "a2", []byte("two"))); err != nil {
		t.Fatal(err)
	}
	if err := l.Apply(ctx, Delete("agents", "a1"), Put("weights", "eng", []byte("2"))); err != nil {
		t.Fatal(err)
	}
	lastFrame = fileSize(t, path)
	if err := l.Apply(ctx, Put("agents", "torn", bytes.Repeat([]byte("x"), 200))); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path, lastFrame
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

// loadAll returns the content of the given buckets.
func loadAll(t *testing.T, s Store, buckets ...string) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, b := range buckets {
		got, err := s.Load(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		out[b] = map[string]string{}
		for k, v := range got {
			out[b][k] = string(v)
		}
	}
	return out
}

// TestLogTornTail checks recovery from a crash during the last write: for
// every length of its frame cut off, for zeros in place of all or the end
// of it, and for zeros after it, the log opens with the earlier writes and
// without the torn one, says what it dropped, and a new write after it
// survives a reopen.
func TestLogTornTail(t *testing.T) {
	path, last := logFile(t)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	frame := int(int64(len(whole)) - last)
	type damage struct {
		name string
		file []byte
		want map[string]string // agents after recovery
	}
	before := map[string]string{"a2": "two"}
	var cases []damage
	for cut := 1; cut < frame; cut++ {
		cases = append(cases, damage{fmt.Sprintf("cut %d of %d", cut, frame), whole[:len(whole)-cut], before})
	}
	zeroed := bytes.Clone(whole)
	clear(zeroed[last:])
	cases = append(cases, damage{"frame zeroed", zeroed, before})
	for kept := 1; kept < frameHeaderSize; kept++ { // the header landed in part, the file extended
		partial := bytes.Clone(whole)
		clear(partial[last+int64(kept):])
		cases = append(cases, damage{fmt.Sprintf("%d bytes of the header, zeros after", kept), partial, before})
	}
	zeroedEnd := bytes.Clone(whole)
	clear(zeroedEnd[len(whole)-50:])
	cases = append(cases, damage{"end of frame zeroed", zeroedEnd, before})
	withZeros := append(bytes.Clone(whole), make([]byte, 4096)...)
	cases = append(cases, damage{"zeros after the last frame", withZeros, map[string]string{"a2": "two", "torn": strings.Repeat("x", 200)}})

	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(path, c.file, 0o600); err != nil {
				t.Fatal(err)
			}
			var logged bytes.Buffer
			l, err := OpenLog(path, LogOptions{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			if err != nil {
				t.Fatalf("open after a torn write: %v", err)
			}
			if diff := cmp.Diff(c.want, loadAll(t, l, "agents")["agents"]); diff != "" {
				t.Errorf("agents after recovery (-want +got):\n%s", diff)
			}
			if !strings.Contains(logged.String(), "bytes_dropped=") {
				t.Errorf("recovery logged %q, want the bytes dropped", logged.String())
			}
			if err := l.Apply(ctx, Put("agents", "after", []byte("new"))); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			logged.Reset()
			l, err = OpenLog(path, LogOptions{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			defer l.Close()
			want := maps.Clone(c.want)
			want["after"] = "new"
			got := loadAll(t, l, "agents", "weights")
			if diff := cmp.Diff(map[string]map[string]string{"agents": want, "weights": {"eng": "2"}}, got); diff != "" {
				t.Errorf("after a write and a reopen (-want +got):\n%s", diff)
			}
			if logged.Len() != 0 {
				t.Errorf("second recovery logged %q, want nothing dropped", logged.String())
			}
		})
	}
}

// TestLogRefusesDamage checks that a file damaged anywhere but in its
// torn tail, or that is not a log, is refused with an error naming the
// file and the offset, and left as it was.
func TestLogRefusesDamage(t *testing.T) {
	path, last := logFile(t)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	middle := bytes.Clone(whole)
	middle[last-3] ^= 0x40 // in the second frame's payload
	// A length grown past the end of the file by one flipped bit looks
	// like a frame cut short, but its own CRC tells it apart.
	length := bytes.Clone(whole)
	length[len(logMagic)+2] ^= 0x10
	zeroFrame := bytes.Clone(whole)
	clear(zeroFrame[len(logMagic):last]) // two frames of zeros, data after them
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"bit flip in a middle frame", middle, "corrupt frame at offset"},
		{"bit flip in the first frame's length", length, fmt.Sprintf("corrupt frame at offset %d", len(logMagic))},
		{"zeroed frames before a good one", zeroFrame, fmt.Sprintf("corrupt frame at offset %d", len(logMagic))},
		{"wrong header", append([]byte("NOTALOG\x01"), whole[len(logMagic):]...), "not a slackline log"},
		{"another version", append([]byte("SLKVLOG\x01"), whole[len(logMagic):]...), "not a slackline log"},
		{"text file", []byte("agents: [a1, a2]\nweights: {eng: 2}\n"), "not a slackline log"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(path, c.file, 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := OpenLog(path, LogOptions{})
			if err == nil {
				l.Close()
				t.Fatal("a damaged log opened")
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Errorf("open = %v, want an error naming %s and saying %q", err, path, c.want)
			}
			after, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(after, c.file) {
				t.Errorf("the refused file was changed (%v)", err)
			}
		})
	}
}

// TestLogRefusesBadMutations checks that the writes bbolt refuses are
// refused by a log too, and that the log goes on.
func TestLogRefusesBadMutations(t *testing.T) {
	l, err := OpenLog(filepath.Join(t.TempDir(), "registry.log"), LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for _, m := range []Mutation{
		Put("", "k", []byte("v")),
		Put("agents", "", []byte("v")),
		Delete("agents", ""),
		Put("agents", strings.Repeat("k", MaxKeySize+1), []byte("v")),
	} {
		if err := l.Apply(ctx, Put("agents", "good", []byte("v")), m); err == nil {
			t.Errorf("Apply of %.20q/%.20q succeeded", m.Bucket, m.Key)
		}
	}
	if err := l.Apply(ctx, Put("agents", strings.Repeat("k", MaxKeySize), []byte{})); err != nil {
		t.Fatalf("key of the longest size, empty value: %v", err)
	}
	got := loadAll(t, l, "agents")["agents"]
	if len(got) != 1 || got[strings.Repeat("k", MaxKeySize)] != "" {
		t.Fatalf("agents = %d keys, want only the longest key (no write of a refused Apply)", len(got))
	}
}

// TestLogCompaction writes, overwrites and deletes records with a tiny
// compaction threshold and checks that the content is the same before and
// after compactions and after a reopen, deletes stay deleted, and the file
// is smaller than the same writes without compaction.
func TestLogCompaction(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	compacted, err := OpenLog(filepath.Join(dir, "compacted.log"), LogOptions{CompactThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := OpenLog(filepath.Join(dir, "plain.log"), LogOptions{CompactThreshold: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{"agents": {}, "frameworks": {}}
	for round := range 20 {
		var ms []Mutation
		for i := range 30 {
			bucket := []string{"agents", "frameworks"}[i%2]
			key := fmt.Sprint("k", i)
			if (i+round)%7 == 0 {
				ms = append(ms, Delete(bucket, key))
				delete(want[bucket], key)
				continue
			}
			value := fmt.Sprintf("%s-%d-%s", key, round, strings.Repeat("v", 100))
			ms = append(ms, Put(bucket, key, []byte(value)))
			want[bucket][key] = value
		}
		for _, s := range []*Log{compacted, plain} {
			if err := s.Apply(ctx, ms...); err != nil {
				t.Fatal(err)
			}
		}
		if diff := cmp.Diff(want, loadAll(t, compacted, "agents", "frameworks")); diff != "" {
			t.Fatalf("round %d (-want +got):\n%s", round, diff)
		}
	}
	plain.Close()
	if err := compacted.Close(); err != nil {
		t.Fatal(err)
	}
	small, big := fileSize(t, filepath.Join(dir, "compacted.log")), fileSize(t, filepath.Join(dir, "plain.log"))
	if small >= big/2 {
		t.Errorf("compacted log of %d bytes, uncompacted %d: want it less than half", small, big)
	}
	if _, err := os.Stat(filepath.Join(dir, "compacted.log.tmp")); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
	reopened, err := OpenLog(filepath.Join(dir, "compacted.log"), LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	if diff := cmp.Diff(want, loadAll(t, reopened, "agents", "frameworks")); diff != "" {
		t.Fatalf("after reopen (-want +got):\n%s", diff)
	}
}

// TestLogCompactionFailureKeepsFile checks that a compaction that cannot
// write its temporary file keeps the log as it is, writes go on, the
// failure is logged once, and compaction succeeds once it can.
func TestLogCompactionFailureKeepsFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.log")
	var logged bytes.Buffer
	l, err := OpenLog(path, LogOptions{CompactThreshold: 1, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.Mkdir(path+".tmp", 0o700); err != nil { // in the way of the temporary file
		t.Fatal(err)
	}
	value := []byte(strings.Repeat("v", 100))
	for range 50 {
		if err := l.Apply(ctx, Put("agents", "a", value)); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logged.String(), "compaction failed"); n != 1 {
		t.Errorf("compaction failure logged %d times, want once: %s", n, logged.String())
	}
	grown := fileSize(t, path)
	if err := os.Remove(path + ".tmp"); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if err := l.Apply(ctx, Put("agents", "a", value)); err != nil {
			t.Fatal(err)
		}
	}
	if size := fileSize(t, path); size >= grown {
		t.Errorf("log of %d bytes after compaction could run, %d before: want it compacted", size, grown)
	}
	if got := loadAll(t, l, "agents")["agents"]; len(got) != 1 || got["a"] != string(value) {
		t.Errorf("agents = %q", got)
	}
}

// BenchmarkApply measures one Apply of one ~200-byte record, the
// registry's write per framework subscription, on each kind of store.
func BenchmarkApply(b *testing.B) {
	value := bytes.Repeat([]byte("r"), 200)
	for _, o := range stores() {
		b.Run(o.name, func(b *testing.B) {
			s, err := o.open(filepath.Join(b.TempDir(), "bench"), time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			keys := make([]string, 300)
			for i := range keys {
				keys[i] = fmt.Sprintf("framework-%04d", i)
			}
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := s.Apply(ctx, Put("frameworks", keys[i%len(keys)], value)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// TestLogLockFollowsCompaction checks that a second process waiting for the
// lock does not get it on the file a compaction renamed away (which no
// longer has a name: both would write, and the second's writes be lost).
func TestLogLockFollowsCompaction(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "registry.log")
	first, err := OpenLog(path, LogOptions{CompactThreshold: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second := make(chan error, 1)
	go func() {
		l, err := OpenLog(path, LogOptions{LockTimeout: 2 * time.Second})
		if err == nil {
			l.Close()
		}
		second <- err
	}()
	// Every Apply compacts (threshold 1): the name moves to a new file
	// again and again while the second process waits.
	for i := 0; ; i++ {
		if err := first.Apply(ctx, Put("agents", "a", []byte(strings.Repeat("x", 100+i%7)))); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-second:
			if !errors.Is(err, filelock.ErrLocked) {
				t.Fatalf("second open while the first holds the log: %v, want %v", err, filelock.ErrLocked)
			}
			return
		default:
		}
	}
}

// TestLogRemovesUnfinishedCompaction checks that the temporary file of a
// compaction a crash interrupted is removed at open, and the log is intact.
func TestLogRemovesUnfinishedCompaction(t *testing.T) {
	path, _ := logFile(t)
	if err := os.WriteFile(path+".tmp", []byte(logMagic+"half"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := OpenLog(path, LogOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unfinished compaction is still there (%v)", err)
	}
	if got := loadAll(t, l, "agents")["agents"]; len(got) != 2 || got["a2"] != "two" {
		t.Errorf("agents = %q", got)
	}
}
