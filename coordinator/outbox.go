package coordinator

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slackline/slackline/internal/ids"
)

// outbox is the queue of one live stream (an agent's session, a framework's
// subscription) and its end. Producers queue under c.mu and never wait;
// the stream's goroutine sends, as fast as the peer reads (HTTP/2 and TCP
// flow control pace it). Nothing queued is ever dropped for want of room:
// the queue grows and shrinks with what it holds (an idle outbox holds no
// buffer), and what can be queued is bounded by the state it describes,
// because entries that say the same thing again coalesce:
//
//   - replace queues an entry under a key, dropping the queued entry with
//     that key if any (a newer answer about the same task supersedes the
//     older one, which was not sent yet);
//   - sendIndexed makes an entry findable by several keys, and edit changes
//     or drops a queued entry found by key (an offer rescinded before its
//     Offers event was sent is taken out of the event instead).
//
// The entry point of a flood (Accept, Reconcile) is refused up front when
// the queue holds more than its limit (see limits.go); producers inside the
// coordinator never are.
type outbox[T any] struct {
	id string
	// ready holds a token when entries were queued, the outbox ended or a
	// keepalive fell due since the stream last looked: an idle stream
	// waits on ready alone (and its context), one channel and one parked
	// sudog instead of three.
	ready chan struct{}
	once  sync.Once
	// beat places the stream among those waiting for its pulse's next
	// beat (see pulse).
	beat beatWaiter
	// reason, set when the outbox ends, says why; flush asks its stream to
	// send what is still queued before it ends.
	reason error
	flush  bool

	mu sync.Mutex
	// entries[head:] are queued, oldest first; dead ones were dropped by
	// replace or edit and are skipped.
	entries []outboxEntry[T]
	head    int
	// first is the sequence number of entries[0]; keys maps each key to
	// the sequence number of the queued entry it names.
	first uint64
	keys  map[string]uint64
	live  int
	ended bool
	// servers counts the streams in serve: two for a moment when a new
	// stream claimed the outbox before the one it superseded returned
	// (see claim); claimant is the latest claim.
	servers  int
	claimant *streamClaim
}

// streamClaim is one stream's claim on an outbox.
type streamClaim struct{ cancel context.CancelCauseFunc }

// errSuperseded ends a stream whose outbox a newer stream claimed.
var errSuperseded = errors.New("superseded by a newer stream for the same session")

// claim makes the calling stream the one that serves o: a stream that
// claimed it before is cancelled with errSuperseded (the context returned
// to it says so through context.Cause), takes nothing more from o, and
// ends. An agent whose connection broke without the coordinator noticing
// (a half-open TCP connection, a proxy that kept it) opens a new stream
// for the same session; without this both would take commands, and those
// taken by the old one would be written to a connection nobody reads.
// release, deferred by the caller, gives the claim up.
func (o *outbox[T]) claim(ctx context.Context) (_ context.Context, release func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	mine := &streamClaim{cancel: cancel}
	o.mu.Lock()
	if o.claimant != nil {
		// Under o.mu, as takeFor checks: the older stream takes nothing
		// from here on.
		o.claimant.cancel(errSuperseded)
	}
	o.claimant = mine
	o.mu.Unlock()
	return ctx, func() {
		o.mu.Lock()
		if o.claimant == mine {
			o.claimant = nil
		}
		o.mu.Unlock()
		cancel(nil)
	}
}

type outboxEntry[T any] struct {
	value T
	keys  []string
	dead  bool
}

func newOutbox[T any]() *outbox[T] {
	o := &outbox[T]{id: ids.New(), ready: make(chan struct{}, 1)}
	o.beat.ready = o.ready
	return o
}

// send queues v; it reports false, queuing nothing, once the outbox ended.
func (o *outbox[T]) send(v T) bool { return o.push(v, "") }

// replace queues v under key and drops the queued entry with that key, if
// any: v supersedes it.
func (o *outbox[T]) replace(key string, v T) bool { return o.push(v, key, key) }

// sendIndexed queues v, findable by edit under each of keys until it is
// taken.
func (o *outbox[T]) sendIndexed(v T, keys ...string) bool { return o.push(v, "", keys...) }

// push queues v under keys, first dropping the entry named by superseded.
func (o *outbox[T]) push(v T, superseded string, keys ...string) bool {
	o.mu.Lock()
	if o.ended && !o.flush {
		o.mu.Unlock()
		return false
	}
	if seq, ok := o.keys[superseded]; ok && superseded != "" {
		o.dropLocked(seq)
	}
	seq := o.first + uint64(len(o.entries))
	if len(keys) > 0 {
		if o.keys == nil {
			o.keys = map[string]uint64{}
		}
		for _, k := range keys {
			if old, ok := o.keys[k]; ok {
				o.detachLocked(old, k)
			}
			o.keys[k] = seq
		}
	}
	o.entries = append(o.entries, outboxEntry[T]{value: v, keys: keys})
	o.live++
	o.mu.Unlock()
	o.wake()
	return true
}

// edit finds the queued entry named by key and calls f with it; f returns
// whether to keep it (it may modify the value in place: the entry is not
// being sent). The key no longer names the entry afterwards. edit reports
// whether the entry was still queued.
func (o *outbox[T]) edit(key string, f func(T) (keep bool)) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	seq, ok := o.keys[key]
	if !ok {
		return false
	}
	o.detachLocked(seq, key)
	if !f(o.entries[seq-o.first].value) {
		o.dropLocked(seq)
	}
	return true
}

// detachLocked makes key no longer name the entry seq.
func (o *outbox[T]) detachLocked(seq uint64, key string) {
	delete(o.keys, key)
	e := &o.entries[seq-o.first]
	for i, k := range e.keys {
		if k == key {
			e.keys = append(e.keys[:i:i], e.keys[i+1:]...)
			break
		}
	}
}

// dropLocked drops the queued entry seq.
func (o *outbox[T]) dropLocked(seq uint64) {
	e := &o.entries[seq-o.first]
	for _, k := range e.keys {
		delete(o.keys, k)
	}
	*e = outboxEntry[T]{dead: true}
	o.live--
}

// take removes and returns the oldest queued entry; ok is false when none
// is queued.
func (o *outbox[T]) take() (v T, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.takeLocked()
}

// takeFor is take for a stream that serves o with ctx: nothing once ctx
// ended, checked under the lock that claim cancels a stream's ctx under.
func (o *outbox[T]) takeFor(ctx context.Context) (v T, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ctx.Err() != nil {
		return v, false
	}
	return o.takeLocked()
}

func (o *outbox[T]) takeLocked() (v T, ok bool) {
	for o.head < len(o.entries) {
		e := o.entries[o.head]
		o.entries[o.head] = outboxEntry[T]{}
		seq := o.first + uint64(o.head)
		o.head++
		if e.dead {
			continue
		}
		for _, k := range e.keys {
			if o.keys[k] == seq {
				delete(o.keys, k)
			}
		}
		o.live--
		v, ok = e.value, true
		break
	}
	o.compactLocked()
	return v, ok
}

// compactLocked gives back the space of taken entries: all of it once the
// queue is empty, so an idle outbox holds no buffer; otherwise by copying
// the queued entries once at least half of the slice was taken.
func (o *outbox[T]) compactLocked() {
	switch {
	case o.head == len(o.entries):
		o.first += uint64(len(o.entries))
		o.entries, o.head = nil, 0
		if len(o.keys) == 0 {
			o.keys = nil
		}
	case o.head >= 64 && 2*o.head >= len(o.entries):
		o.first += uint64(o.head)
		o.entries, o.head = append([]outboxEntry[T](nil), o.entries[o.head:]...), 0
	}
}

// len returns the number of queued entries.
func (o *outbox[T]) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.live
}

func (o *outbox[T]) end(reason error) {
	o.once.Do(func() {
		o.mu.Lock()
		o.ended, o.reason = true, reason
		o.mu.Unlock()
		o.wake()
	})
}

// endAfterDelivery ends the outbox once its stream has sent what is queued;
// what is queued after it is still delivered.
func (o *outbox[T]) endAfterDelivery() {
	o.once.Do(func() {
		o.mu.Lock()
		o.ended, o.flush = true, true
		o.mu.Unlock()
		o.wake()
	})
}

// hasEnded reports whether the outbox ended.
func (o *outbox[T]) hasEnded() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ended
}

// wake leaves a token in ready unless one is there already.
func (o *outbox[T]) wake() {
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// serve sends what is queued, and keepalive at each beat of beats, until
// the outbox ends (nil) or ctx does (its error). It runs in the stream's
// goroutine.
//
// A stream whose ctx ended takes nothing more. Two streams may serve one
// outbox for a moment (a superseded one that has not returned yet, see
// claim): they share its ready channel and its place
// among the pulse's waiters, so the one that leaves while the other stays
// hands both on, listed for the next beat and woken, instead of taking
// them with it.
func (o *outbox[T]) serve(ctx context.Context, keepalive T, beats *pulse, send func(T) error) error {
	// The pulse's list is changed under o.mu (o.mu before pulse.mu), so
	// that the last stream to leave takes the outbox off it for good.
	o.mu.Lock()
	o.servers++
	beats.wait(&o.beat)
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		o.servers--
		stays := o.servers > 0
		if stays {
			beats.wait(&o.beat)
		} else {
			beats.leave(&o.beat)
		}
		o.mu.Unlock()
		if stays {
			o.wake()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if v, ok := o.takeFor(ctx); ok {
			if err := send(v); err != nil {
				return err
			}
			if o.hasEnded() {
				return ctx.Err()
			}
			continue
		}
		select {
		case <-o.ready:
			// A superseded stream neither ends the session's delivery
			// nor takes its beat.
			if err := ctx.Err(); err != nil {
				return err
			}
			if o.hasEnded() {
				return nil
			}
			if o.beat.due.Swap(false) {
				if err := send(keepalive); err != nil {
					return err
				}
				beats.wait(&o.beat)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pulse is one clock shared by every stream that sends a keepalive at the
// same period, instead of a ticker each. A stream waits for the coming
// beat (wait); at the beat, each waiting stream is marked due and woken
// through its ready channel, and waits again once it sent its keepalive:
// the first to do so after a beat arms the one after it, a period later.
// So every waiting stream sees a beat once per period (the first may come
// sooner than a period after it began), no timer runs while no stream
// waits, and a waiting stream costs the pulse two pointers, not a channel
// of its own or a parked sudog on a shared one.
type pulse struct {
	period time.Duration
	mu     sync.Mutex
	// waiting lists the streams waiting for the coming beat; armed is set
	// while a beat is armed.
	waiting *beatWaiter
	armed   bool
}

// beatWaiter is a stream's place in its pulse's list of waiters.
type beatWaiter struct {
	prev, next *beatWaiter // in pulse.waiting; guarded by pulse.mu
	listed     bool        // guarded by pulse.mu
	ready      chan struct{}
	// due is set at the beat, and cleared by the stream as it sends its
	// keepalive.
	due atomic.Bool
}

func newPulse(period time.Duration) *pulse { return &pulse{period: period} }

// wait lists w for the coming beat, arming one if none is.
func (p *pulse) wait(w *beatWaiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.listed {
		return
	}
	w.prev, w.next, w.listed = nil, p.waiting, true
	if p.waiting != nil {
		p.waiting.prev = w
	}
	p.waiting = w
	if !p.armed {
		p.armed = true
		time.AfterFunc(p.period, p.beat)
	}
}

// leave takes w off the list, if it is on it.
func (p *pulse) leave(w *beatWaiter) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !w.listed {
		return
	}
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		p.waiting = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	w.prev, w.next, w.listed = nil, nil, false
}

// beat marks every waiting stream due and wakes it.
func (p *pulse) beat() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for w := p.waiting; w != nil; {
		next := w.next
		w.prev, w.next, w.listed = nil, nil, false
		w.due.Store(true)
		select {
		case w.ready <- struct{}{}:
		default:
		}
		w = next
	}
	p.waiting, p.armed = nil, false
}

// sendQueued sends what the queue holds, without waiting for more; a
// stream whose ctx ended (superseded) sends nothing.
func (o *outbox[T]) sendQueued(ctx context.Context, send func(T) error) error {
	for {
		v, ok := o.takeFor(ctx)
		if !ok {
			return ctx.Err()
		}
		if err := send(v); err != nil {
			return err
		}
	}
}
