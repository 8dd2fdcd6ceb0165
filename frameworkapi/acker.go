package frameworkapi

import (
	"context"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// acker sends a subscription's automatic acknowledgements from its own
// goroutine (#30): the updates the handler finished while a call was in
// flight go together in the next call, up to MaxAcknowledgementsPerCall.
// A burst of 1,500 updates so costs a few calls instead of 1,500, and a
// lone update is acknowledged at once, as before.
type acker struct {
	c     *Client
	queue chan *slacklinev1.Acknowledgement
	done  chan struct{}
}

// startAcker starts the acknowledgements of one subscription; ctx bounds
// their calls (each also by ackTimeout). The caller stops it.
func (c *Client) startAcker(ctx context.Context) *acker {
	a := &acker{c: c, queue: make(chan *slacklinev1.Acknowledgement, MaxAcknowledgementsPerCall), done: make(chan struct{})}
	go a.run(ctx)
	return a
}

// add queues the acknowledgement of an update. It blocks while
// MaxAcknowledgementsPerCall wait: the subscription reads no further event
// until they are sent.
func (a *acker) add(status *slacklinev1.TaskStatus) { a.queue <- acknowledgement(status) }

// stop sends what is queued and returns once it is sent.
func (a *acker) stop() {
	close(a.queue)
	<-a.done
}

func (a *acker) run(ctx context.Context) {
	defer close(a.done)
	batch := make([]*slacklinev1.Acknowledgement, 0, MaxAcknowledgementsPerCall)
	for ack := range a.queue {
		batch = append(batch[:0], ack)
	ready:
		for len(batch) < MaxAcknowledgementsPerCall {
			select {
			case ack, ok := <-a.queue:
				if !ok {
					break ready
				}
				batch = append(batch, ack)
			default:
				break ready
			}
		}
		a.send(ctx, batch)
	}
}

func (a *acker) send(ctx context.Context, batch []*slacklinev1.Acknowledgement) {
	// After the handler tore the framework down there is nobody to
	// acknowledge to: the coordinator acknowledges on its behalf.
	if a.c.tornDown.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	if err := a.c.acknowledgeAll(ctx, batch); err != nil {
		// The agent re-sends an update that was not acknowledged, so its
		// next delivery retries.
		a.c.log.Warn("acknowledge failed", "updates", len(batch), "err", err)
	}
}
