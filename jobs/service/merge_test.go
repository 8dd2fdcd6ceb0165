package service

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestMergeKeepsOneRecordPerKey: a batch retried through a store outage is
// merged with every later one; it must not grow with each retry.
func TestMergeKeepsOneRecordPerKey(t *testing.T) {
	t.Parallel()
	var pending Batch
	for i := range 100 {
		v := []byte{byte(i)}
		pending = pending.merge(Batch{Records: []Record{{Job: "a", Index: -1, Value: v}, {Job: "a", Index: 3, Value: v}}})
	}
	pending = pending.merge(Batch{Records: []Record{{Job: "b", Index: 0, Value: []byte("b")}}})
	want := []Record{{Job: "a", Index: -1, Value: []byte{99}}, {Job: "a", Index: 3, Value: []byte{99}}, {Job: "b", Index: 0, Value: []byte("b")}}
	if diff := cmp.Diff(want, pending.Records); diff != "" {
		t.Errorf("merged records (-want +got):\n%s", diff)
	}
	pending = pending.merge(Batch{Deleted: []string{"a"}})
	if diff := cmp.Diff([]Record{{Job: "b", Index: 0, Value: []byte("b")}}, pending.Records); diff != "" {
		t.Errorf("after deleting a (-want +got):\n%s", diff)
	}
}
