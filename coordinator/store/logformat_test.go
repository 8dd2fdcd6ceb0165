package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// encodeLog writes frames in the log versions' format, as their writer did
// (one frame per group commit); only the tests write logs.
func encodeLog(frames ...[]Mutation) []byte {
	buf := []byte(logMagic)
	for _, ms := range frames {
		start := len(buf)
		buf = append(buf, make([]byte, frameHeaderSize)...)
		buf = binary.AppendUvarint(buf, uint64(len(ms)))
		for _, m := range ms {
			op := byte(opPut)
			if m.Value == nil {
				op = opDelete
			}
			buf = append(buf, op)
			buf = binary.AppendUvarint(buf, uint64(len(m.Bucket)))
			buf = append(buf, m.Bucket...)
			buf = binary.AppendUvarint(buf, uint64(len(m.Key)))
			buf = append(buf, m.Key...)
			if op == opPut {
				buf = binary.AppendUvarint(buf, uint64(len(m.Value)))
				buf = append(buf, m.Value...)
			}
		}
		frame := buf[start:]
		binary.LittleEndian.PutUint32(frame[0:4], uint32(len(frame)-frameHeaderSize))
		binary.LittleEndian.PutUint32(frame[4:8], crc32.Checksum(frame[0:4], castagnoli))
		binary.LittleEndian.PutUint32(frame[8:12], crc32.Checksum(frame[frameHeaderSize:], castagnoli))
	}
	return buf
}

// smallFrames are the frames of smallLog.
var smallFrames = [][]Mutation{
	{Put(BucketAgents, "a1", []byte("one")), Put(BucketAgents, "a2", []byte("two"))},
	{Delete(BucketAgents, "a1"), Put(BucketWeights, "eng", []byte("2"))},
	{Put(BucketAgents, "torn", bytes.Repeat([]byte("x"), 200))},
}

// smallLog is a log of smallFrames, and the offset of the last one.
func smallLog() (data []byte, lastFrame int) {
	return encodeLog(smallFrames...), len(encodeLog(smallFrames[:2]...))
}

// replay decodes data into the records it leaves.
func replay(data []byte) (map[string]map[string]string, logRecovery, error) {
	got := map[string]map[string]string{}
	rec, err := decodeLog(data, func(bucket, key, value []byte) {
		b := got[string(bucket)]
		if b == nil {
			b = map[string]string{}
			got[string(bucket)] = b
		}
		if value == nil {
			delete(b, string(key))
		} else {
			b[string(key)] = string(value)
		}
	})
	return got, rec, err
}

// TestDecodeLogWrittenByTheLog checks the decoder against a log written by
// the log version's own writer (testdata/registry.log: group commits,
// overwrites, deletes, an empty and a binary value, a compaction, a
// reopen) and the records that version loaded from it.
func TestDecodeLogWrittenByTheLog(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/registry.log")
	if err != nil {
		t.Fatal(err)
	}
	var loaded map[string]map[string][]byte
	raw, err := os.ReadFile("testdata/registry.log.want.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &loaded); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{}
	for b, records := range loaded {
		if len(records) == 0 {
			continue
		}
		want[b] = map[string]string{}
		for k, v := range records {
			want[b][k] = string(v)
		}
	}
	got, rec, err := replay(data)
	if err != nil {
		t.Fatal(err)
	}
	for b, records := range got {
		if len(records) == 0 {
			delete(got, b) // every key of it deleted
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-the log version loaded +decoded):\n%s", diff)
	}
	if rec != (logRecovery{End: int64(len(data))}) {
		t.Errorf("recovery = %+v, want the whole file and no torn tail", rec)
	}
}

// TestDecodeLogTornTail checks the torn tails the log dropped at open: for
// every length of the last frame cut off, for zeros in place of all or the
// end of it or of its header, and for zeros after it, the earlier frames
// are read, the torn one is not, and where it started is reported.
func TestDecodeLogTornTail(t *testing.T) {
	t.Parallel()
	whole, last := smallLog()
	before := map[string]map[string]string{BucketAgents: {"a2": "two"}, BucketWeights: {"eng": "2"}}
	type torn struct {
		name string
		data []byte
	}
	var cases []torn
	for cut := 1; cut < len(whole)-last; cut++ {
		cases = append(cases, torn{fmt.Sprintf("cut %d of %d", cut, len(whole)-last), whole[:len(whole)-cut]})
	}
	zeroed := bytes.Clone(whole)
	clear(zeroed[last:])
	cases = append(cases, torn{"frame zeroed", zeroed})
	for kept := 1; kept < frameHeaderSize; kept++ { // the header landed in part, the file extended
		partial := bytes.Clone(whole)
		clear(partial[last+kept:])
		cases = append(cases, torn{fmt.Sprintf("%d bytes of the header, zeros after", kept), partial})
	}
	zeroedEnd := bytes.Clone(whole)
	clear(zeroedEnd[len(whole)-50:])
	cases = append(cases, torn{"end of frame zeroed", zeroedEnd})
	for _, c := range cases {
		got, rec, err := replay(c.data)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if diff := cmp.Diff(before, got); diff != "" {
			t.Errorf("%s: records (-want +got):\n%s", c.name, diff)
		}
		if rec.End != int64(last) || rec.Torn == "" {
			t.Errorf("%s: recovery = %+v, want the tail from %d dropped with a reason", c.name, rec, last)
		}
	}

	withZeros := append(bytes.Clone(whole), make([]byte, 4096)...)
	got, rec, err := replay(withZeros)
	if err != nil || got[BucketAgents]["torn"] != strings.Repeat("x", 200) || rec.End != int64(len(whole)) {
		t.Errorf("zeros after the last frame: %v, %+v, %v; want every frame read and the zeros dropped", got, rec, err)
	}
	for _, empty := range [][]byte{nil, {0, 0, 0}, []byte(logMagic[:5]), []byte(logMagic)} {
		if got, rec, err := replay(empty); err != nil || len(got) != 0 || rec.Torn != "" {
			t.Errorf("log %q (a creation a crash interrupted): %v, %+v, %v; want empty", empty, got, rec, err)
		}
	}
}

// TestDecodeLogRefusesDamage checks that damage anywhere but in a torn
// tail, or a file that is not a log, is refused with the offset.
func TestDecodeLogRefusesDamage(t *testing.T) {
	t.Parallel()
	whole, last := smallLog()
	middle := bytes.Clone(whole)
	middle[last-3] ^= 0x40 // in the second frame's payload
	// A length grown past the end of the file by one flipped bit looks
	// like a frame cut short, but its own CRC tells it apart.
	length := bytes.Clone(whole)
	length[len(logMagic)+2] ^= 0x10
	zeroFrames := bytes.Clone(whole)
	clear(zeroFrames[len(logMagic):last]) // two frames of zeros, data after them
	undecodable := encodeLog([]Mutation{Put(BucketAgents, "a", []byte("x"))})
	undecodable[len(logMagic)+frameHeaderSize+1] = 9 // the op byte
	binary.LittleEndian.PutUint32(undecodable[len(logMagic)+8:], crc32.Checksum(undecodable[len(logMagic)+frameHeaderSize:], castagnoli))
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"bit flip in a middle frame", middle, fmt.Sprintf("corrupt frame at offset %d (CRC mismatch)", len(encodeLog(smallFrames[0])))},
		{"bit flip in the first frame's length", length, fmt.Sprintf("corrupt frame at offset %d (frame header CRC mismatch)", len(logMagic))},
		{"zeroed frames before a good one", zeroFrames, fmt.Sprintf("corrupt frame at offset %d", len(logMagic))},
		{"a frame whose checksum holds but does not decode", undecodable, fmt.Sprintf("corrupt frame at offset %d: unknown op 9", len(logMagic))},
		{"wrong header", append([]byte("NOTALOG\x01"), whole[len(logMagic):]...), "bad header at offset 0"},
		{"the log's first format", append([]byte("SLKVLOG\x01"), whole[len(logMagic):]...), "bad header at offset 0"},
		{"text file", []byte("agents: [a1, a2]\nweights: {eng: 2}\n"), "bad header at offset 0"},
	} {
		if _, err := decodeLog(c.data, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// FuzzDecodeLog feeds the decoder arbitrary bytes (a registry.log is read
// from disk): it never panics, and when it reads a file it reads the good
// part the same way with the torn tail cut off.
func FuzzDecodeLog(f *testing.F) {
	whole, last := smallLog()
	f.Add(whole)
	f.Add(whole[:last+5])
	f.Add([]byte(logMagic))
	f.Add([]byte("not a log"))
	if golden, err := os.ReadFile("testdata/registry.log"); err == nil {
		f.Add(golden)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, rec, err := replay(data)
		if err != nil {
			return
		}
		if rec.End < 0 || rec.End > int64(len(data)) || (rec.Torn == "") != (rec.End == int64(len(data))) {
			t.Fatalf("recovery %+v of %d bytes", rec, len(data))
		}
		again, rec2, err := replay(data[:rec.End])
		if err != nil || rec2.Torn != "" || rec2.End != rec.End {
			t.Fatalf("the good part %d bytes: %+v, %v; want read whole", rec.End, rec2, err)
		}
		if diff := cmp.Diff(got, again); diff != "" {
			t.Fatalf("the good part reads otherwise (-whole +good part):\n%s", diff)
		}
	})
}
