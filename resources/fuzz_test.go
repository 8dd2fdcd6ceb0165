package resources

import (
	"errors"
	"testing"
)

// FuzzParse checks that Parse never panics, that every error wraps
// ErrInvalid, and that accepted input round-trips through String.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"cpus:4;mem:8192;ports:[31000-32000]", "cpus:-1", "ports:[5-1]", "mem:NaN",
		"ports:[1-2,2-3]", "disk:1e12", ";;", "cpus:0.0005", "ports:[]",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		r, err := Parse(text)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", text, err)
			}
			return
		}
		again, err := Parse(r.String())
		if err != nil {
			t.Fatalf("Parse(String()) of %q = %q: %v", text, r.String(), err)
		}
		if !again.Equal(r) {
			t.Fatalf("round trip of %q: %v != %v", text, again, r)
		}
		if !r.Contains(r) || !r.Sub(r).IsEmpty() {
			t.Fatalf("%v: containment or subtraction broken", r)
		}
	})
}
