package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/ids"
	"github.com/slackline/slackline/internal/kv"
)

// Status update retry: the first re-send after minRetry, doubling to maxRetry.
const (
	minRetry = 5 * time.Second
	maxRetry = time.Minute
)

type taskKey struct{ frameworkID, taskID string }

// pendingUpdate is a checkpointed status update awaiting acknowledgement.
type pendingUpdate struct {
	key         string // checkpoint key; orders updates of a task
	frameworkID string
	status      *slacklinev1.TaskStatus
}

// updateStream is the ordered queue of one task's unacknowledged updates;
// only its head is in flight.
type updateStream struct {
	queue       []*pendingUpdate
	nextAttempt time.Time
	backoff     time.Duration
}

// statusUpdates is the agent's status update manager, like Mesos's: every
// update is checkpointed before it is sent and re-sent until acknowledged.
type statusUpdates struct {
	ckpt *checkpoint
	now  func() time.Time

	mu      sync.Mutex
	streams map[taskKey]*updateStream
	seq     uint64
}

func newStatusUpdates(ckpt *checkpoint, now func() time.Time) *statusUpdates {
	return &statusUpdates{ckpt: ckpt, now: now, streams: map[taskKey]*updateStream{}}
}

// load restores the checkpointed updates.
func (s *statusUpdates) load(ctx context.Context) error {
	recs, err := s.ckpt.updates(ctx)
	if err != nil {
		return err
	}
	keys := make([]string, 0, len(recs))
	for k := range recs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		rec := recs[k]
		tk := taskKey{rec.GetFrameworkId(), rec.GetStatus().GetTaskId()}
		st := s.stream(tk)
		st.queue = append(st.queue, &pendingUpdate{key: k, frameworkID: rec.GetFrameworkId(), status: rec.GetStatus()})
		var seq uint64
		if _, err := fmt.Sscanf(k[len(k)-20:], "%d", &seq); err == nil && seq > s.seq {
			s.seq = seq
		}
	}
	return nil
}

func (s *statusUpdates) stream(tk taskKey) *updateStream {
	st := s.streams[tk]
	if st == nil {
		st = &updateStream{backoff: minRetry}
		s.streams[tk] = st
	}
	return st
}

// enqueue assigns the update a uuid, checkpoints it and queues it.
// The extra mutations are written in the same transaction.
func (s *statusUpdates) enqueue(ctx context.Context, frameworkID string, status *slacklinev1.TaskStatus, extra ...kv.Mutation) error {
	status.Uuid = ids.NewHex()
	s.mu.Lock()
	s.seq++
	key := fmt.Sprintf("%s\x00%s\x00%020d", frameworkID, status.GetTaskId(), s.seq)
	s.mu.Unlock()
	if err := s.ckpt.putUpdate(ctx, key, &slacklinev1.AgentStatusRecord{FrameworkId: frameworkID, Status: status}, extra...); err != nil {
		return fmt.Errorf("checkpoint status update: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stream(taskKey{frameworkID, status.GetTaskId()})
	st.queue = append(st.queue, &pendingUpdate{key: key, frameworkID: frameworkID, status: status})
	if len(st.queue) == 1 {
		st.nextAttempt, st.backoff = time.Time{}, minRetry
	}
	return nil
}

// acknowledge removes the head update of a task if uuid matches. It reports
// whether the task has no update left.
func (s *statusUpdates) acknowledge(ctx context.Context, tk taskKey, uuid string) (matched, drained bool, err error) {
	s.mu.Lock()
	st := s.streams[tk]
	if st == nil || len(st.queue) == 0 || st.queue[0].status.GetUuid() != uuid {
		s.mu.Unlock()
		return false, st == nil || len(st.queue) == 0, nil
	}
	head := st.queue[0]
	s.mu.Unlock()
	if err := s.ckpt.deleteUpdate(ctx, head.key); err != nil {
		return false, false, fmt.Errorf("checkpoint acknowledgement: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(st.queue) > 0 && st.queue[0] == head {
		st.queue = st.queue[1:]
	}
	st.nextAttempt, st.backoff = time.Time{}, minRetry
	if len(st.queue) == 0 {
		delete(s.streams, tk)
		return true, true, nil
	}
	return true, false, nil
}

// due returns the head updates to send now and schedules their next retry.
func (s *statusUpdates) due() []*pendingUpdate {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*pendingUpdate
	for _, st := range s.streams {
		if len(st.queue) == 0 || now.Before(st.nextAttempt) {
			continue
		}
		out = append(out, st.queue[0])
		st.nextAttempt = now.Add(st.backoff)
		st.backoff = min(2*st.backoff, maxRetry)
	}
	return out
}

// resendAll makes every head update due now (after a re-registration).
func (s *statusUpdates) resendAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.streams {
		st.nextAttempt, st.backoff = time.Time{}, minRetry
	}
}

// pending reports whether a task has unacknowledged updates.
func (s *statusUpdates) pending(tk taskKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams[tk].queueOrNil()) > 0
}

func (st *updateStream) queueOrNil() []*pendingUpdate {
	if st == nil {
		return nil
	}
	return st.queue
}
