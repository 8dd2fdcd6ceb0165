package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// This file reads, and only reads, the registry.log of the versions that
// kept the registry in an append-only log, so that Open can import it into
// registry.db. It recovers the file as that version did at open: a torn
// tail (the last frame of a write that never returned) is dropped, any
// other damage refuses the file.
//
// Format: the 8-byte header logMagic, then frames of [payload length
// u32][CRC-32C of the length u32][CRC-32C of the payload u32][payload],
// little-endian. A payload is a uvarint count of mutations (at least one),
// then for each an op byte (opPut or opDelete) and the bucket, key and
// (puts only) value, each a uvarint length and bytes; bucket and key are
// never empty.

const (
	// logMagic starts every log file: a name and the format's version.
	logMagic = "SLKVLOG\x02"
	// frameHeaderSize is the length and the two CRCs before each payload.
	frameHeaderSize = 12
	// maxFrameSize is the largest payload the log wrote.
	maxFrameSize = 256 << 20

	opPut    = 1
	opDelete = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// logRecovery is what decodeLog found besides the mutations.
type logRecovery struct {
	// End is where the last good frame ends: the file's size unless a
	// torn tail was dropped.
	End int64
	// Torn says why the bytes from End on were dropped ("" if none were).
	Torn string
}

// decodeLog reads a log file's bytes and calls visit with every mutation
// of every frame, in order (value nil for a delete; the slices point into
// data). A frame is checked whole before any of its mutations is visited.
//
// A torn tail is dropped (reported in the logRecovery): a frame header cut
// short, a frame that runs past the end of the file with an intact length,
// or a frame failing a CRC with only zeros after it (the file extended
// before its data landed). Anything else (a bad header, a frame failing a
// CRC or that does not decode with data after it) is an error giving the
// offset, so that no acknowledged write is dropped silently. A file of at
// most the header's size that is all zeros or a prefix of the header is
// an empty log (a creation a crash interrupted).
func decodeLog(data []byte, visit func(bucket, key, value []byte)) (logRecovery, error) {
	size := int64(len(data))
	if size <= int64(len(logMagic)) && (isZero(data) || bytes.HasPrefix([]byte(logMagic), data)) {
		return logRecovery{End: size}, nil
	}
	if !bytes.HasPrefix(data, []byte(logMagic)) {
		return logRecovery{}, errors.New("not a registry log of an earlier version (bad header at offset 0)")
	}
	off := int64(len(logMagic))
	for off < size {
		payload, after, bad := nextFrame(data, off)
		if bad != "" {
			// A frame that runs past the end (after == 0), or a bad one
			// with only zeros after it, is a write that never completed.
			if after == 0 || isZero(data[after:]) {
				return logRecovery{End: off, Torn: bad}, nil
			}
			return logRecovery{}, fmt.Errorf("corrupt frame at offset %d (%s) with data after it: refusing to drop acknowledged writes", off, bad)
		}
		if err := decodeFrame(payload, nil); err != nil {
			return logRecovery{}, fmt.Errorf("corrupt frame at offset %d: %w", off, err)
		}
		if visit != nil {
			_ = decodeFrame(payload, visit) // checked just above
		}
		off = after
	}
	return logRecovery{End: size}, nil
}

// nextFrame returns the payload of the frame at off and the offset after
// it, or why it is bad: with after 0 when it runs past the end of data
// (torn), otherwise with after where the bytes following it start.
func nextFrame(data []byte, off int64) (payload []byte, after int64, bad string) {
	end := int64(len(data))
	if end-off < frameHeaderSize {
		return nil, 0, "frame header cut short"
	}
	head := data[off : off+frameHeaderSize]
	n := int64(binary.LittleEndian.Uint32(head[0:4]))
	switch {
	case crc32.Checksum(head[0:4], castagnoli) != binary.LittleEndian.Uint32(head[4:8]):
		// A payload is never zero-led (it starts with its mutation
		// count), so a header that landed in part with zeros after it
		// is torn too.
		return nil, off + frameHeaderSize, "frame header CRC mismatch"
	case n == 0 || n > maxFrameSize:
		return nil, off + frameHeaderSize, fmt.Sprintf("frame length %d out of range", n)
	case off+frameHeaderSize+n > end:
		return nil, 0, fmt.Sprintf("frame of %d bytes cut short at %d", n, end-off-frameHeaderSize)
	}
	after = off + frameHeaderSize + n
	payload = data[off+frameHeaderSize : after]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(head[8:12]) {
		return nil, after, "CRC mismatch"
	}
	return payload, after, ""
}

// decodeFrame checks a payload and, when visit is not nil, calls it with
// each mutation in order (value nil for a delete, non-nil for a put).
func decodeFrame(payload []byte, visit func(bucket, key, value []byte)) error {
	count, n := binary.Uvarint(payload)
	if n <= 0 || count == 0 {
		return errors.New("bad mutation count")
	}
	p := payload[n:]
	for range count {
		if len(p) == 0 {
			return errors.New("fewer mutations than counted")
		}
		op := p[0]
		p = p[1:]
		var bucket, key, value []byte
		var ok bool
		if bucket, p, ok = cutField(p); !ok || len(bucket) == 0 {
			return errors.New("bad bucket")
		}
		if key, p, ok = cutField(p); !ok || len(key) == 0 {
			return errors.New("bad key")
		}
		switch op {
		case opPut:
			if value, p, ok = cutField(p); !ok {
				return errors.New("bad value")
			}
			if value == nil {
				value = []byte{}
			}
		case opDelete:
		default:
			return fmt.Errorf("unknown op %d", op)
		}
		if visit != nil {
			visit(bucket, key, value)
		}
	}
	if len(p) != 0 {
		return errors.New("trailing bytes")
	}
	return nil
}

// cutField cuts one uvarint-length-prefixed field from the front of p.
func cutField(p []byte) (field, rest []byte, ok bool) {
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)-k) {
		return nil, nil, false
	}
	end := k + int(n)
	return p[k:end:end], p[end:], true
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
