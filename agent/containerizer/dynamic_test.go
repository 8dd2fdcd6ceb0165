package containerizer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestParseIDRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want IDRange
		err  string
	}{
		{in: "2000000000-2099999999", want: DefaultDynamicIDs},
		{in: "100000-100000", want: IDRange{First: 100000, Count: 1}},
		{in: "5-10", err: "below 1000"},
		{in: "2000000000-2147483647", err: "2^31-1"},
		{in: "10-5", err: "FIRST <= LAST"},
		{in: "abc", err: "FIRST-LAST"},
		{in: "1000-", err: "FIRST-LAST"},
	} {
		got, err := ParseIDRange(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseIDRange(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseIDRange(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.err == "" && got.String() != tc.in:
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
}

// TestDynamicIDsHostWide: allocators of two agents (two work dirs) on
// one host state never hand out the same id, nor does an agent whose work
// dir was reset (a new allocator that remembers nothing); a wrap skips live
// ids and reclaims the ids of leases whose container's cgroup is gone; a
// lease is live while its owner runs or its cgroup exists, in this boot;
// release only ends a container's own lease; sweep removes dead leases; a
// range of live ids is an error.
func TestDynamicIDsHostWide(t *testing.T) {
	t.Parallel()
	dir, cgroups := t.TempDir(), t.TempDir()
	r := IDRange{First: 5000, Count: 20}
	gone := procRef{Pid: 1 << 30, StartTime: 1} // no such process: liveness is the cgroup's
	open := func(owner procRef, boot string) *dynamicIDs {
		t.Helper()
		d, err := openDynamicIDs(dir, r, owner, boot, "/proc")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	none := func(uint32) bool { return false }
	take := func(d *dynamicIDs, agent, container string) uint32 {
		t.Helper()
		cg := filepath.Join(cgroups, container)
		if err := os.MkdirAll(cg, 0o755); err != nil {
			t.Fatal(err)
		}
		id, err := d.take(uidLease{Container: container, Cgroup: cg, StateDir: agent}, none)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	a, b := open(gone, "boot"), open(gone, "boot")
	holder := map[uint32]string{}
	for i := range 5 {
		for _, ag := range []struct {
			d    *dynamicIDs
			name string
		}{{a, "a"}, {b, "b"}} {
			c := fmt.Sprintf("%s-%d", ag.name, i)
			id := take(ag.d, ag.name, c)
			if h, dup := holder[id]; dup {
				t.Fatalf("id %d handed out to %s and %s", id, h, c)
			}
			holder[id] = c
		}
	}
	// a's work dir is reset: the new allocator knows nothing, the host does.
	a2 := open(gone, "boot")
	id := take(a2, "a", "a-reset")
	if h, dup := holder[id]; dup {
		t.Fatalf("after a reset: id %d, live in %s", id, h)
	}
	holder[id] = "a-reset"
	// b-2's task ended and its cgroup was removed (its agent died before
	// Destroy): its id is reclaimed once the cursor comes back to it.
	var b2 uint32
	for id, c := range holder {
		if c == "b-2" {
			b2 = id
		}
	}
	if err := os.Remove(filepath.Join(cgroups, "b-2")); err != nil {
		t.Fatal(err)
	}
	for range int(r.Count) - len(holder) {
		id := take(b, "b", fmt.Sprintf("fill-%d", len(holder)))
		if h, dup := holder[id]; dup {
			t.Fatalf("id %d live in %s handed out again", id, h)
		}
		holder[id] = "fill"
	}
	if id := take(a, "a", "reuse"); id != b2 {
		t.Fatalf("after the wrap: %d, want %d, whose container is gone", id, b2)
	}
	if _, err := a.take(uidLease{Container: "full", Cgroup: filepath.Join(cgroups, "none")}, none); !errors.Is(err, ErrTaskUser) {
		t.Fatalf("every id live: %v, want ErrTaskUser", err)
	}
	// release: only the container's own lease.
	if err := a.release(b2, "someone-else", filepath.Join(cgroups, "reuse")); err != nil {
		t.Fatal(err)
	}
	if l, _ := a.readLease(b2); l == nil {
		t.Fatal("release by another container ended the lease")
	}
	if err := a.release(b2, "reuse", filepath.Join(cgroups, "reuse")); err != nil {
		t.Fatal(err)
	}
	if l, _ := a.readLease(b2); l != nil {
		t.Fatalf("lease %+v after its release", l)
	}
	// A lease of a live owner holds its id even before its cgroup exists;
	// one of another boot holds nothing.
	self, err := procStartTime("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	live := open(procRef{Pid: os.Getpid(), StartTime: self}, "boot")
	if !live.live(&uidLease{Owner: live.owner, BootID: "boot", Cgroup: filepath.Join(cgroups, "not-yet")}) {
		t.Error("a lease of a running agent whose cgroup does not exist yet is not live")
	}
	if a.live(&uidLease{Owner: live.owner, BootID: "other boot", Cgroup: cgroups}) {
		t.Error("a lease of another boot is live")
	}
	// sweep: every lease whose cgroup is gone.
	if err := os.RemoveAll(cgroups); err != nil {
		t.Fatal(err)
	}
	if n, err := a.sweep(); err != nil || n != int(r.Count)-1 {
		t.Fatalf("sweep = %d, %v; want %d", n, err, r.Count-1)
	}
}

// TestDynamicIDsConcurrent: agents allocating at the same time (each its
// own open file, so flock serialises them as it does processes) never get
// the same id.
func TestDynamicIDsConcurrent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	self, err := procStartTime("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	const agents, each = 4, 25
	ids := make(chan uint32, agents*each)
	var wg sync.WaitGroup
	for a := range agents {
		d, err := openDynamicIDs(dir, IDRange{First: 7000, Count: 1000}, procRef{Pid: os.Getpid(), StartTime: self}, "boot", "/proc")
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for i := range each {
				id, err := d.take(uidLease{Container: fmt.Sprintf("%d-%d", a, i)}, func(uint32) bool { return false })
				if err != nil {
					t.Error(err)
					return
				}
				ids <- id
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[uint32]bool{}
	for id := range ids {
		if seen[id] {
			t.Errorf("id %d handed out twice", id)
		}
		seen[id] = true
	}
}

// TestDynamicIDsTornLease: a lease left empty or half-written by a crash of
// the host (leases are written without fsync) does not hold its id, and
// does not stop the allocator: the id is handed out again.
func TestDynamicIDsTornLease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := IDRange{First: 7000, Count: 3}
	d, err := openDynamicIDs(dir, r, procRef{Pid: os.Getpid(), StartTime: 1}, "boot", "/proc")
	if err != nil {
		t.Fatal(err)
	}
	for i, torn := range []string{"", `{"container": "c`} {
		if err := os.WriteFile(d.leasePath(r.First+uint32(i)), []byte(torn), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	none := func(uint32) bool { return false }
	for i := range 2 {
		id, err := d.take(uidLease{Container: fmt.Sprint("c", i)}, none)
		if err != nil || id != r.First+uint32(i) {
			t.Fatalf("take = %d, %v; want %d (its lease is torn)", id, err, r.First+uint32(i))
		}
		l, err := d.readLease(id)
		if err != nil || l == nil || l.Container != fmt.Sprint("c", i) {
			t.Errorf("lease of %d = %+v, %v; want container c%d's", id, l, err, i)
		}
	}
}

// TestDynamicIDsReserveBlocks: an allocator moves the host's cursor (a
// durable write) once per dynamicIDsBlock ids and hands out the ids it
// reserved first; another allocator starts after the block.
func TestDynamicIDsReserveBlocks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := IDRange{First: 9000, Count: 1000}
	open := func() *dynamicIDs {
		d, err := openDynamicIDs(dir, r, procRef{Pid: os.Getpid(), StartTime: 1}, "boot", "/proc")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	cursor := func() string {
		data, err := os.ReadFile(filepath.Join(dir, dynamicIDsNext))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	none := func(uint32) bool { return false }
	a, b := open(), open()
	want := fmt.Sprintf("%s %d", r, dynamicIDsBlock)
	for i := range dynamicIDsBlock {
		id, err := a.take(uidLease{Container: fmt.Sprint("a", i)}, none)
		if err != nil || id != r.First+uint32(i) {
			t.Fatalf("take %d = %d, %v; want %d", i, id, err, r.First+uint32(i))
		}
		if got := cursor(); got != want {
			t.Fatalf("after %d ids the cursor is %q, want %q (one write per block)", i+1, got, want)
		}
	}
	if id, err := b.take(uidLease{Container: "b"}, none); err != nil || id != r.First+dynamicIDsBlock {
		t.Fatalf("another allocator got %d, %v; want %d, after the block", id, err, r.First+dynamicIDsBlock)
	}
	if id, err := a.take(uidLease{Container: "a-next"}, none); err != nil || id != r.First+2*dynamicIDsBlock {
		t.Fatalf("a's next block starts at %d, %v; want %d, after b's block", id, err, r.First+2*dynamicIDsBlock)
	}
}
