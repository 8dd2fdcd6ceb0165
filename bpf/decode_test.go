package bpf

import (
	"testing"
	"time"
	"unsafe"
)

func TestDecodeEvent(t *testing.T) {
	t.Parallel()
	e := schedEvent{TimestampNs: 5_000, Cgroup: 7, Culprit: 9, LatencyNs: 3_000_000, DelayedNs: 2_000_000, Cpu: 1, Pid: 42, Class: uint32(ClassProtected)}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&e)), unsafe.Sizeof(e))
	want := ThresholdEvent{Time: time.Unix(0, 1_000_000_000+5_000), Cgroup: 7, Class: ClassProtected, Culprit: 9,
		Latency: 3 * time.Millisecond, Delayed: 2 * time.Millisecond, CPU: 1, PID: 42}
	for _, tc := range []struct {
		name string
		raw  []byte
		want ThresholdEvent
		ok   bool
	}{
		{"event", raw, want, true},
		{"padded record", append(append([]byte(nil), raw...), 0, 0, 0, 0, 0, 0, 0, 0), want, true},
		{"short record", raw[:len(raw)-1], ThresholdEvent{}, false},
		{"empty record", nil, ThresholdEvent{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := decodeEvent(tc.raw, 1_000_000_000)
			if ok != tc.ok || !got.Time.Equal(tc.want.Time) {
				t.Fatalf("decodeEvent = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
			got.Time, tc.want.Time = time.Time{}, time.Time{}
			if got != tc.want {
				t.Errorf("decodeEvent = %+v; want %+v", got, tc.want)
			}
		})
	}
}

// TestEventRecordSize: the ring buffer's space for an event is its 8-byte
// header and the event rounded up to 8 bytes (64 bytes: 4096 events in the
// 256 KiB buffer, as DefaultEventBatchWindow's doc says).
func TestEventRecordSize(t *testing.T) {
	t.Parallel()
	if eventRecordSize != 64 {
		t.Errorf("eventRecordSize = %d, want 64 (8 + a 56-byte event)", eventRecordSize)
	}
}
