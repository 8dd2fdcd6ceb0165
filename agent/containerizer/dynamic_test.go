package containerizer

import (
	"os"
	"path/filepath"
	"strings"
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

// TestDynamicIDs: ids come in order, never one in use; the recorded
// high-water mark means a restart (a new dynamicIDs on the same file,
// knowing nothing of the ids handed out) never hands one out again before
// the range wraps; a wrap skips ids in use; a full range is an error.
func TestDynamicIDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), dynamicIDsFile)
	r := IDRange{First: 5000, Count: 2500}
	none := func(uint32) bool { return false }
	d, err := loadDynamicIDs(path, r)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	take := func(d *dynamicIDs, inUse func(uint32) bool) uint32 {
		t.Helper()
		id, err := d.take(inUse)
		if err != nil {
			t.Fatal(err)
		}
		if id < d.r.First || id >= d.r.First+d.r.Count {
			t.Fatalf("id %d outside %v", id, d.r)
		}
		return id
	}
	for i := range 10 {
		id := take(d, func(id uint32) bool { return id == 5003 })
		if want := uint32(5000 + i); i >= 3 {
			want++
			if id != want {
				t.Fatalf("take %d = %d, want %d (5003 is in use)", i, id, want)
			}
		}
		seen[id] = true
	}
	// A restart: the next ids are past everything handed out.
	d2, err := loadDynamicIDs(path, r)
	if err != nil {
		t.Fatal(err)
	}
	if id := take(d2, none); seen[id] || id != 5000+dynamicIDBlock {
		t.Fatalf("after a restart: %d, want %d (the next block)", id, 5000+dynamicIDBlock)
	}
	// To the end of the range, then the wrap skips what is in use.
	for d2.next < r.Count {
		take(d2, none)
	}
	if id := take(d2, func(id uint32) bool { return id < 5002 }); id != 5002 {
		t.Fatalf("after the wrap: %d, want 5002 (5000 and 5001 in use)", id)
	}
	// Another range on the same file starts at its beginning.
	other := IDRange{First: 9000, Count: 10}
	d3, err := loadDynamicIDs(path, other)
	if err != nil {
		t.Fatal(err)
	}
	if id := take(d3, none); id != 9000 {
		t.Fatalf("a new range starts at %d, want 9000", id)
	}
	if _, err := d3.take(func(uint32) bool { return true }); err == nil {
		t.Fatal("every id in use: want an error")
	}
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadDynamicIDs(path, r); err == nil {
		t.Fatal("a corrupt record: want an error, not ids handed out again")
	}
}
