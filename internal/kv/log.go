package kv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/slackline/slackline/internal/atomicfile"
	"github.com/slackline/slackline/internal/filelock"
)

// Log is a Store in an append-only file: each group commit appends one
// frame holding every mutation of every Apply in the group, written with
// one write(2) and made durable with one fdatasync(2). Apply returns after
// the fdatasync of its frame: an acknowledged write survives a crash.
//
// It suits a store written record by record and read only at recovery
// (the coordinator's registry): a commit allocates almost nothing and the
// file is never mapped, so neither garbage nor file pages grow the
// process's memory. Load scans the whole file; nothing of the records is
// kept in memory between calls. The file is compacted (rewritten with the
// live records only) once it has grown past twice its size after the last
// compaction plus LogOptions.CompactThreshold; a compaction holds the live
// records in memory while it writes them, then drops them.
//
// Measured (BenchmarkApply, one 200-byte Put): 280 B and 5 allocations per
// Apply, all of them the group commit's bookkeeping, against bbolt's 14 KB
// and 63. With scripts/bench/idle --streams 300 (one registry write per
// subscription), the coordinator's RSS per idle subscription fell from
// 32.1-32.9 KB with bbolt to 29.7-30.6 KB, an RSS ratio to a bare handler of
// 1.14-1.20 instead of 1.24-1.29.
//
// Format: the 8-byte header logMagic, then frames of [payload length
// u32][CRC-32C of the length u32][CRC-32C of the payload u32][payload],
// little-endian. The length has a checksum of its own so that damage to it
// is told from a write cut short (a frame that runs past the end of the
// file is torn only if its length is intact). A payload is a
// uvarint count of mutations, then for each an op byte (put or delete) and
// the bucket, key and (puts only) value, each a uvarint length and bytes.
type Log struct {
	path  string
	log   *slog.Logger
	group *group

	// mu guards what follows; the writer holds it while it appends and
	// syncs, Load while it reads, so a Load never sees a frame half-written.
	mu        sync.Mutex
	f         *os.File // nil once closed
	size      int64    // end of the last frame: where the next is written
	compactAt int64    // compact after a commit that leaves size above this
	threshold int64
	failed    error // set when a sync failed: the file's state is unknown
	// compactFailed is set while compaction fails, so that it is logged once.
	compactFailed bool

	buf []byte // the writer's frame buffer, reused across commits
}

// LogOptions configures OpenLog. The zero value is usable.
type LogOptions struct {
	// LockTimeout is how long to wait for another process's lock on the
	// file before failing; zero tries once.
	LockTimeout time.Duration
	// Logger receives the warnings of recovery (a torn tail dropped) and
	// compaction failures (default: discarded).
	Logger *slog.Logger
	// CompactThreshold is the growth, beyond twice the size after the last
	// compaction, that starts a compaction (default 4 MiB).
	CompactThreshold int64
}

const (
	// logMagic starts every log file: a name and the format's version.
	logMagic = "SLKVLOG\x02"
	// frameHeaderSize is the length and the two CRCs before each payload.
	frameHeaderSize = 12
	// MaxFrameSize is the largest payload of one frame: a group commit
	// larger than this is split call by call, and a single Apply larger
	// than this fails.
	MaxFrameSize = 256 << 20
	// MaxKeySize is the longest key (bbolt's limit, so that both stores
	// refuse the same writes).
	MaxKeySize = 32768

	opPut    = 1
	opDelete = 2

	defaultCompactThreshold = 4 << 20
	// maxKeptBuffer is the largest frame buffer kept between commits.
	maxKeptBuffer = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// OpenLog opens the log file at path, creating it and its directory if
// needed, and recovers it: a torn tail (the last frame of a write that
// never returned: cut short, or failing its CRC with only zeros after it)
// is truncated and logged; any other damage (a bad header, a frame failing
// its CRC with data after it) refuses the file with an error naming it and
// the offset, so that no acknowledged write is dropped silently. A second
// process opening the same file waits up to opts.LockTimeout for the first
// one's lock, then fails.
func OpenLog(path string, opts LogOptions) (*Log, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	f, err := openLocked(path, opts.LockTimeout)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// A compaction that a crash interrupted left its new file behind.
	if err := os.Remove(path + ".tmp"); err != nil && !errors.Is(err, os.ErrNotExist) {
		f.Close()
		return nil, fmt.Errorf("remove the unfinished compaction of %s: %w", path, err)
	}
	l := &Log{path: path, log: opts.Logger, f: f, threshold: opts.CompactThreshold}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.threshold <= 0 {
		l.threshold = defaultCompactThreshold
	}
	if err := l.recover(); err != nil {
		f.Close()
		return nil, err
	}
	l.compactAt = 2*l.size + l.threshold
	l.group = newGroup(l.commit)
	return l, nil
}

// openLocked opens (creating it if needed) the file at path and takes its
// lock, waiting up to timeout. The lock is on the file the name points to
// once it is held: a compaction by the process that held it renames a new
// file over the name, so a lock taken on the old one, which no longer has
// a name, is given up and the name opened again.
func openLocked(path string, timeout time.Duration) (*os.File, error) {
	deadline := time.Now().Add(timeout)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if err := filelock.Lock(f, time.Until(deadline)); err != nil {
			f.Close()
			return nil, err
		}
		held, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		named, err := os.Stat(path)
		if err == nil && os.SameFile(held, named) {
			return f, nil
		}
		f.Close()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
}

// recover checks the header, scans the frames and truncates a torn tail,
// leaving l.size at the end of the last good frame.
func (l *Log) recover() error {
	info, err := l.f.Stat()
	if err != nil {
		return fmt.Errorf("open %s: %w", l.path, err)
	}
	size := info.Size()
	head := make([]byte, min(size, int64(len(logMagic))))
	if _, err := l.f.ReadAt(head, 0); err != nil {
		return fmt.Errorf("read %s: %w", l.path, err)
	}
	if size <= int64(len(logMagic)) && (isZero(head) || bytes.HasPrefix([]byte(logMagic), head)) {
		// A new file, or one whose creation a crash interrupted.
		return l.writeHeader()
	}
	if !bytes.Equal(head, []byte(logMagic)) {
		return fmt.Errorf("open %s: not a slackline log (bad header at offset 0)", l.path)
	}
	l.size = int64(len(logMagic))
	r := newFrameReader(l.f, l.size, size)
	for {
		payload, err := r.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return l.recoverTail(err, size)
		}
		if err := decodeFrame(payload, nil); err != nil {
			return fmt.Errorf("open %s: corrupt frame at offset %d: %w", l.path, r.frame, err)
		}
		l.size = r.off
	}
}

// recoverTail truncates a torn tail whose frame r could not read, or
// refuses a file damaged elsewhere.
func (l *Log) recoverTail(err error, size int64) error {
	bad, ok := errors.AsType[*badFrame](err)
	if !ok {
		return fmt.Errorf("read %s: %w", l.path, err)
	}
	if !bad.torn {
		zero, err := zeroFrom(l.f, bad.after, size)
		if err != nil {
			return fmt.Errorf("read %s: %w", l.path, err)
		}
		if !zero {
			return fmt.Errorf("open %s: corrupt frame at offset %d (%s) with data after it: refusing to drop acknowledged writes", l.path, bad.off, bad.reason)
		}
	}
	if err := l.f.Truncate(bad.off); err != nil {
		return fmt.Errorf("truncate torn tail of %s: %w", l.path, err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", l.path, err)
	}
	l.log.Warn("registry log: dropped the torn tail of a write that never completed",
		"path", l.path, "offset", bad.off, "bytes_dropped", size-bad.off, "reason", bad.reason)
	l.size = bad.off
	return nil
}

// writeHeader starts an empty file.
func (l *Log) writeHeader() error {
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("init %s: %w", l.path, err)
	}
	if _, err := l.f.WriteAt([]byte(logMagic), 0); err != nil {
		return fmt.Errorf("init %s: %w", l.path, err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", l.path, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(l.path)); err != nil {
		return fmt.Errorf("sync directory of %s: %w", l.path, err)
	}
	l.size = int64(len(logMagic))
	return nil
}

// Apply implements Store. Calls that arrive while a commit is under way
// wait for the next one and share it: one frame, one write(2) and one
// fdatasync for all of them. Apply returns after the fdatasync of its
// frame. A mutation with an empty bucket or key, a key longer than
// MaxKeySize, or an Apply larger than MaxFrameSize fails that call alone.
func (l *Log) Apply(ctx context.Context, mutations ...Mutation) error {
	return l.group.apply(ctx, mutations)
}

// commit appends writes as one frame and syncs it; it runs on the writer
// goroutine.
func (l *Log) commit(writes [][]Mutation) error {
	frame, err := l.encode(writes)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return ErrClosed
	}
	if l.failed != nil {
		return l.failed
	}
	if _, err := l.f.WriteAt(frame, l.size); err != nil {
		// Cut what may have landed, or the next frame would follow garbage.
		if terr := l.f.Truncate(l.size); terr != nil {
			l.failed = fmt.Errorf("%s: a failed append could not be undone (%w): %w", l.path, terr, ErrFailed)
			return l.failed
		}
		return fmt.Errorf("append to %s: %w", l.path, err)
	}
	if err := syscall.Fdatasync(int(l.f.Fd())); err != nil {
		// After a failed fsync the kernel may have dropped the dirty
		// pages: nothing written after can be trusted until a reopen
		// recovers the file.
		l.failed = fmt.Errorf("sync %s: %w: %w", l.path, err, ErrFailed)
		return l.failed
	}
	l.size += int64(len(frame))
	if l.size > l.compactAt {
		l.compact()
	}
	return nil
}

// encode checks writes and encodes them into one frame in l.buf.
func (l *Log) encode(writes [][]Mutation) ([]byte, error) {
	if cap(l.buf) > maxKeptBuffer {
		l.buf = nil
	}
	count := 0
	for _, mutations := range writes {
		for _, m := range mutations {
			switch {
			case m.Bucket == "":
				return nil, &writeError{fmt.Errorf("write %s/%s: bucket name required", m.Bucket, m.Key)}
			case m.Key == "":
				return nil, &writeError{fmt.Errorf("write %s/%s: key required", m.Bucket, m.Key)}
			case len(m.Key) > MaxKeySize:
				return nil, &writeError{fmt.Errorf("write %s/%.64s...: key of %d bytes, longer than %d", m.Bucket, m.Key, len(m.Key), MaxKeySize)}
			}
			count++
		}
	}
	buf := append(l.buf[:0], make([]byte, frameHeaderSize)...)
	buf = binary.AppendUvarint(buf, uint64(count))
	for _, mutations := range writes {
		for _, m := range mutations {
			buf = appendMutation(buf, m)
			if len(buf)-frameHeaderSize > MaxFrameSize {
				l.buf = nil
				return nil, &writeError{fmt.Errorf("write %s/%s: a commit of more than %d bytes", m.Bucket, m.Key, MaxFrameSize)}
			}
		}
	}
	putFrameHeader(buf)
	l.buf = buf
	return buf, nil
}

// putFrameHeader fills the header of frame, whose payload follows it.
func putFrameHeader(frame []byte) {
	payload := frame[frameHeaderSize:]
	binary.LittleEndian.PutUint32(frame[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(frame[4:8], crc32.Checksum(frame[0:4], castagnoli))
	binary.LittleEndian.PutUint32(frame[8:12], crc32.Checksum(payload, castagnoli))
}

// appendMutation appends m's encoding to buf.
func appendMutation(buf []byte, m Mutation) []byte {
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
	return buf
}

// decodeFrame checks a payload and, when visit is not nil, calls it with
// each mutation in order (value nil for a delete). The slices point into
// payload.
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

// Load implements Store. It reads the whole file, with the writer held
// off, and is meant for recovery at start (the coordinator loads each
// bucket once): the log keeps no index or values in memory.
func (l *Log) Load(ctx context.Context, bucket string) (map[string][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil, ErrClosed
	}
	out := map[string][]byte{}
	err := l.scan(func(b, key, value []byte) {
		if string(b) != bucket {
			return
		}
		if value == nil {
			delete(out, string(key))
		} else {
			out[string(key)] = bytes.Clone(value)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// scan calls visit with every mutation of the file in order. l.mu is held.
func (l *Log) scan(visit func(bucket, key, value []byte)) error {
	r := newFrameReader(l.f, int64(len(logMagic)), l.size)
	for {
		payload, err := r.next()
		if err == io.EOF {
			return nil
		}
		if err == nil {
			err = decodeFrame(payload, visit)
		}
		if err != nil {
			return fmt.Errorf("read %s at offset %d: %w", l.path, r.frame, err)
		}
	}
}

// compact rewrites the file with its live records only: written to
// path+".tmp", synced, renamed over the log, the directory synced. A failure
// keeps the old file (logged once) and is retried after another
// CompactThreshold bytes. It runs on the writer goroutine with l.mu held.
func (l *Log) compact() {
	started, before := time.Now(), l.size
	err := l.rewrite()
	if err != nil {
		if !l.compactFailed {
			l.log.Warn("registry log: compaction failed, the log keeps growing until it succeeds", "path", l.path, "size", l.size, "err", err)
		}
		l.compactFailed = true
		l.compactAt = l.size + l.threshold
		return
	}
	// Rare (the file doubles between two), and writes wait for it: say
	// how long.
	l.log.Info("registry log: compacted", "path", l.path, "bytes_before", before, "bytes_after", l.size,
		"took", time.Since(started).Round(time.Millisecond), "after_failures", l.compactFailed)
	l.compactFailed = false
	l.compactAt = 2*l.size + l.threshold
}

// rewrite writes the live records to a new file and puts it in place of
// l.f.
func (l *Log) rewrite() error {
	live := map[string]map[string][]byte{}
	err := l.scan(func(bucket, key, value []byte) {
		b := live[string(bucket)]
		if value == nil {
			delete(b, string(key))
			return
		}
		if b == nil {
			b = map[string][]byte{}
			live[string(bucket)] = b
		}
		b[string(key)] = bytes.Clone(value)
	})
	if err != nil {
		return err
	}
	tmpPath := l.path + ".tmp"
	tmp, err := os.OpenFile(tmpPath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	// Locked before it takes the log's name: no other process may take it.
	if err := filelock.Lock(tmp, 0); err != nil {
		tmp.Close()
		return err
	}
	size, err := writeLive(tmp, live)
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = os.Rename(tmpPath, l.path)
	}
	if err != nil {
		tmp.Close()
		os.Remove(tmpPath)
		return err
	}
	l.f.Close()
	l.f, l.size = tmp, size
	// Until the rename is durable, a crash could bring the old file back:
	// writes acknowledged from the new one would be lost. No write is
	// taken until it is.
	if err := atomicfile.SyncDir(filepath.Dir(l.path)); err != nil {
		l.failed = fmt.Errorf("%s: compacted, but its directory could not be synced (%w): %w", l.path, err, ErrFailed)
		l.log.Error("registry log: sync directory after compaction failed; refusing writes until reopened", "path", l.path, "err", err)
	}
	return nil
}

// writeLive streams the header and the records of live to f, in frames of
// about maxKeptBuffer bytes, sorted by bucket and key, and returns the
// file's size.
func writeLive(f *os.File, live map[string]map[string][]byte) (int64, error) {
	w := bufio.NewWriterSize(f, 64<<10)
	size := int64(len(logMagic))
	if _, err := w.WriteString(logMagic); err != nil {
		return 0, err
	}
	var frame []Mutation
	var buf []byte
	flush := func() error {
		if len(frame) == 0 {
			return nil
		}
		buf = append(buf[:0], make([]byte, frameHeaderSize)...)
		buf = binary.AppendUvarint(buf, uint64(len(frame)))
		for _, m := range frame {
			buf = appendMutation(buf, m)
		}
		putFrameHeader(buf)
		size += int64(len(buf))
		frame = frame[:0]
		_, err := w.Write(buf)
		return err
	}
	frameBytes := 0
	for _, bucket := range slices.Sorted(maps.Keys(live)) {
		records := live[bucket]
		for _, key := range slices.Sorted(maps.Keys(records)) {
			// A frame holds records up to maxKeptBuffer, or one larger
			// record alone (no larger than the frame it came in).
			n := 1 + len(bucket) + len(key) + len(records[key]) + 3*binary.MaxVarintLen32
			if frameBytes > 0 && frameBytes+n > maxKeptBuffer {
				if err := flush(); err != nil {
					return 0, err
				}
				frameBytes = 0
			}
			frame = append(frame, Put(bucket, key, records[key]))
			frameBytes += n
		}
	}
	if err := flush(); err != nil {
		return 0, err
	}
	return size, w.Flush()
}

// Close implements Store. Writes already waiting are committed first; an
// Apply after Close returns ErrClosed. Every call waits for that.
func (l *Log) Close() error {
	l.group.close()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// frameReader reads the frames of a log file between two offsets.
type frameReader struct {
	r        *bufio.Reader
	off, end int64 // the next frame's offset, the end of the data
	frame    int64 // the offset of the frame next returned
	head     [frameHeaderSize]byte
	payload  []byte
}

// badFrame is a frame that could not be read: torn when it runs past the
// end of the file (the write of it never completed); otherwise after is
// where the bytes after it start.
type badFrame struct {
	off, after int64
	torn       bool
	reason     string
}

func (e *badFrame) Error() string {
	return fmt.Sprintf("bad frame at offset %d: %s", e.off, e.reason)
}

func newFrameReader(f *os.File, off, end int64) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(io.NewSectionReader(f, off, end-off), 64<<10), off: off, end: end}
}

// next returns the next frame's payload (valid until the next call),
// io.EOF at the end, or a *badFrame.
func (r *frameReader) next() ([]byte, error) {
	r.frame = r.off
	if r.off == r.end {
		return nil, io.EOF
	}
	if r.end-r.off < frameHeaderSize {
		return nil, &badFrame{off: r.off, torn: true, reason: "frame header cut short"}
	}
	if _, err := io.ReadFull(r.r, r.head[:]); err != nil {
		return nil, err
	}
	n := int64(binary.LittleEndian.Uint32(r.head[0:4]))
	sum := binary.LittleEndian.Uint32(r.head[8:12])
	switch {
	case crc32.Checksum(r.head[0:4], castagnoli) != binary.LittleEndian.Uint32(r.head[4:8]):
		// Zeros where a frame should be (the file extended before its
		// data landed) are a torn tail if nothing but zeros follows;
		// anything else is damage.
		// (A payload is never zero-led: it starts with its mutation
		// count. So a header cut short with zeros after it is torn too.)
		return nil, &badFrame{off: r.off, after: r.off + frameHeaderSize, reason: "frame header CRC mismatch"}
	case n == 0 || n > MaxFrameSize:
		// The writer never writes these.
		return nil, &badFrame{off: r.off, after: r.off + frameHeaderSize, reason: fmt.Sprintf("frame length %d out of range", n)}
	case r.off+frameHeaderSize+n > r.end:
		return nil, &badFrame{off: r.off, torn: true, reason: fmt.Sprintf("frame of %d bytes cut short at %d", n, r.end-r.off-frameHeaderSize)}
	}
	if int64(cap(r.payload)) < n {
		r.payload = make([]byte, n)
	}
	payload := r.payload[:n]
	if _, err := io.ReadFull(r.r, payload); err != nil {
		return nil, err
	}
	after := r.off + frameHeaderSize + n
	if crc32.Checksum(payload, castagnoli) != sum {
		return nil, &badFrame{off: r.off, after: after, reason: "CRC mismatch"}
	}
	r.off = after
	return payload, nil
}

// zeroFrom reports whether the bytes of f from off to end are all zero.
func zeroFrom(f *os.File, off, end int64) (bool, error) {
	buf := make([]byte, 64<<10)
	for off < end {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
		if !isZero(buf[:n]) {
			return false, nil
		}
		if err != nil && err != io.EOF {
			return false, err
		}
		if n == 0 {
			break
		}
		off += int64(n)
	}
	return true, nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
