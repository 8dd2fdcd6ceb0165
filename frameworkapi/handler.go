package frameworkapi

import (
	"context"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// Handler receives the events of a subscription. Run calls its methods one at
// a time, in the order the coordinator sent the events, from the goroutine
// that called Run; a method may call any method of the *Client it is given
// (Launch, Decline, Kill, ...). While a method runs no further event is read,
// so a method should return promptly: block too long and the coordinator's
// heartbeats pile up unread (they do not count as missed; see Run).
//
// Embed BaseHandler to implement only the methods you need, or use
// HandlerFuncs.
type Handler interface {
	// Subscribed is called after every successful (re)subscription, before
	// any other event of that subscription. ev.FrameworkId is the id to
	// persist for failover.
	Subscribed(ctx context.Context, c *Client, ev *slacklinev1.SubscribedEvent)
	// Offers is called with new offers. Each must eventually be accepted
	// (Launch, Accept) or declined (Decline); an offer left alone is held
	// until the coordinator rescinds it.
	Offers(ctx context.Context, c *Client, offers []*slacklinev1.Offer)
	// InverseOffers is called with new inverse offers: requests to leave the
	// agents of the offers before their unavailability starts.
	InverseOffers(ctx context.Context, c *Client, offers []*slacklinev1.InverseOffer)
	// Rescind says an offer is no longer valid.
	Rescind(ctx context.Context, c *Client, offerID string)
	// RescindInverseOffer says an inverse offer is no longer valid.
	RescindInverseOffer(ctx context.Context, c *Client, inverseOfferID string)
	// Update delivers a task status update. Unless Config.ManualAcknowledge
	// is set, the SDK acknowledges it after Update returns.
	Update(ctx context.Context, c *Client, status *slacklinev1.TaskStatus)
	// Failure says an agent was lost; its tasks get their own updates.
	Failure(ctx context.Context, c *Client, agentID string)
	// Error delivers the coordinator's last word before it ends the
	// framework for good; Run then returns an error wrapping ErrTornDown.
	Error(ctx context.Context, c *Client, message string)
	// Disconnected is called when a subscription ends and Run is about to
	// reconnect. err says why. Calls on c fail with ErrNotSubscribed until
	// the next Subscribed.
	Disconnected(ctx context.Context, c *Client, err error)
}

// BaseHandler implements every Handler method as a no-op. Embed it in a
// handler type to implement only the methods it needs.
type BaseHandler struct{}

var _ Handler = BaseHandler{}

// Subscribed does nothing.
func (BaseHandler) Subscribed(context.Context, *Client, *slacklinev1.SubscribedEvent) {}

// Offers does nothing: the offers are held until rescinded. Real handlers
// should decline the offers they do not use.
func (BaseHandler) Offers(context.Context, *Client, []*slacklinev1.Offer) {}

// InverseOffers does nothing.
func (BaseHandler) InverseOffers(context.Context, *Client, []*slacklinev1.InverseOffer) {}

// Rescind does nothing.
func (BaseHandler) Rescind(context.Context, *Client, string) {}

// RescindInverseOffer does nothing.
func (BaseHandler) RescindInverseOffer(context.Context, *Client, string) {}

// Update does nothing (the SDK still acknowledges the update unless
// Config.ManualAcknowledge is set).
func (BaseHandler) Update(context.Context, *Client, *slacklinev1.TaskStatus) {}

// Failure does nothing.
func (BaseHandler) Failure(context.Context, *Client, string) {}

// Error does nothing.
func (BaseHandler) Error(context.Context, *Client, string) {}

// Disconnected does nothing.
func (BaseHandler) Disconnected(context.Context, *Client, error) {}

// HandlerFuncs adapts plain functions to Handler: each nil field is a no-op.
type HandlerFuncs struct {
	SubscribedFunc          func(ctx context.Context, c *Client, ev *slacklinev1.SubscribedEvent)
	OffersFunc              func(ctx context.Context, c *Client, offers []*slacklinev1.Offer)
	InverseOffersFunc       func(ctx context.Context, c *Client, offers []*slacklinev1.InverseOffer)
	RescindFunc             func(ctx context.Context, c *Client, offerID string)
	RescindInverseOfferFunc func(ctx context.Context, c *Client, inverseOfferID string)
	UpdateFunc              func(ctx context.Context, c *Client, status *slacklinev1.TaskStatus)
	FailureFunc             func(ctx context.Context, c *Client, agentID string)
	ErrorFunc               func(ctx context.Context, c *Client, message string)
	DisconnectedFunc        func(ctx context.Context, c *Client, err error)
}

var _ Handler = HandlerFuncs{}

// Subscribed calls h.SubscribedFunc if set.
func (h HandlerFuncs) Subscribed(ctx context.Context, c *Client, ev *slacklinev1.SubscribedEvent) {
	if h.SubscribedFunc != nil {
		h.SubscribedFunc(ctx, c, ev)
	}
}

// Offers calls h.OffersFunc if set.
func (h HandlerFuncs) Offers(ctx context.Context, c *Client, offers []*slacklinev1.Offer) {
	if h.OffersFunc != nil {
		h.OffersFunc(ctx, c, offers)
	}
}

// InverseOffers calls h.InverseOffersFunc if set.
func (h HandlerFuncs) InverseOffers(ctx context.Context, c *Client, offers []*slacklinev1.InverseOffer) {
	if h.InverseOffersFunc != nil {
		h.InverseOffersFunc(ctx, c, offers)
	}
}

// Rescind calls h.RescindFunc if set.
func (h HandlerFuncs) Rescind(ctx context.Context, c *Client, offerID string) {
	if h.RescindFunc != nil {
		h.RescindFunc(ctx, c, offerID)
	}
}

// RescindInverseOffer calls h.RescindInverseOfferFunc if set.
func (h HandlerFuncs) RescindInverseOffer(ctx context.Context, c *Client, inverseOfferID string) {
	if h.RescindInverseOfferFunc != nil {
		h.RescindInverseOfferFunc(ctx, c, inverseOfferID)
	}
}

// Update calls h.UpdateFunc if set.
func (h HandlerFuncs) Update(ctx context.Context, c *Client, status *slacklinev1.TaskStatus) {
	if h.UpdateFunc != nil {
		h.UpdateFunc(ctx, c, status)
	}
}

// Failure calls h.FailureFunc if set.
func (h HandlerFuncs) Failure(ctx context.Context, c *Client, agentID string) {
	if h.FailureFunc != nil {
		h.FailureFunc(ctx, c, agentID)
	}
}

// Error calls h.ErrorFunc if set.
func (h HandlerFuncs) Error(ctx context.Context, c *Client, message string) {
	if h.ErrorFunc != nil {
		h.ErrorFunc(ctx, c, message)
	}
}

// Disconnected calls h.DisconnectedFunc if set.
func (h HandlerFuncs) Disconnected(ctx context.Context, c *Client, err error) {
	if h.DisconnectedFunc != nil {
		h.DisconnectedFunc(ctx, c, err)
	}
}
