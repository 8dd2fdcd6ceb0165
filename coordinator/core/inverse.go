package core

import (
	"fmt"
	"slices"
	"time"

	"github.com/slackline/slackline/coordinator/maintenance"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// SendInverseOffers sends an inverse offer for each active draining agent
// to each connected framework that uses it, unless it has one outstanding
// or answered the last one with a filter that has not expired. The users
// of an agent are the frameworks with outstanding offers on it and those
// users names for it (the frameworks with tasks there: the shell knows the
// tasks).
func (k *Core) SendInverseOffers(now time.Time, users map[string][]string) Ready {
	k.sendInverseOffers(now, users)
	return k.take()
}

func (k *Core) sendInverseOffers(now time.Time, users map[string][]string) {
	if len(k.draining) == 0 {
		return
	}
	var order []string
	byFramework := map[string][]*slacklinev1.InverseOffer{}
	for _, id := range k.Draining() {
		a := k.agents[id]
		ids := slices.Clone(users[id])
		for _, o := range a.offers {
			ids = append(ids, o.FrameworkID)
		}
		slices.Sort(ids)
		for _, fid := range slices.Compact(ids) {
			fw := k.frameworks[fid]
			if fw == nil || !fw.connected || a.inverse[fid] != nil || now.Before(a.inverseRefuse[fid]) {
				continue
			}
			io := k.newInverseOffer(fw, a)
			if _, ok := byFramework[fid]; !ok {
				order = append(order, fid)
			}
			byFramework[fid] = append(byFramework[fid], io.Proto)
		}
	}
	for _, fid := range order {
		offers := byFramework[fid]
		k.out.Counts.InverseOffersSent += len(offers)
		k.send(fid, &slacklinev1.Event{Event: &slacklinev1.Event_Offers{Offers: &slacklinev1.OffersEvent{InverseOffers: offers}}})
	}
}

func (k *Core) newInverseOffer(fw *framework, a *agent) *InverseOffer {
	id := k.nextID("I")
	io := &InverseOffer{
		ID: id, FrameworkID: fw.id, AgentID: a.spec.ID, Machine: a.spec.Maint.Machine,
		Proto: &slacklinev1.InverseOffer{
			Id: id, FrameworkId: fw.id, AgentId: a.spec.ID, Hostname: a.spec.Hostname,
			Unavailability: a.spec.Maint.Unavailability, Resources: a.spec.Total.Proto("", resources.Regular),
		},
	}
	k.inverse[id] = io
	put(&fw.inverse, id, io)
	a.inverse[fw.id] = io
	return io
}

// removeInverseOffer forgets an inverse offer without telling its
// framework.
func (k *Core) removeInverseOffer(io *InverseOffer) {
	delete(k.inverse, io.ID)
	if fw := k.frameworks[io.FrameworkID]; fw != nil {
		delete(fw.inverse, io.ID)
	}
	if a := k.agents[io.AgentID]; a != nil && a.inverse[io.FrameworkID] == io {
		delete(a.inverse, io.FrameworkID)
	}
}

// rescindInverseOffers withdraws the outstanding inverse offers for an
// agent and tells their frameworks.
func (k *Core) rescindInverseOffers(a *agent) {
	ids := make([]string, 0, len(a.inverse))
	for fid := range a.inverse {
		ids = append(ids, fid)
	}
	slices.Sort(ids)
	for _, fid := range ids {
		io := a.inverse[fid]
		k.removeInverseOffer(io)
		k.send(fid, &slacklinev1.Event{Event: &slacklinev1.Event_RescindInverseOffer{
			RescindInverseOffer: &slacklinev1.RescindInverseOfferEvent{InverseOfferId: io.ID}}})
	}
}

// dropInverseOffers forgets a framework's outstanding inverse offers.
func (k *Core) dropInverseOffers(fw *framework) {
	for _, io := range fw.inverse {
		k.removeInverseOffer(io)
	}
}

// ErrUnknownInverseOffer is wrapped by AnswerInverseOffers for an id that
// is not an outstanding inverse offer of the framework.
var ErrUnknownInverseOffer = fmt.Errorf("not an outstanding inverse offer of this framework (rescinded, answered or never made)")

// Answer is an inverse offer answered, recorded in the maintenance state.
type Answer struct {
	Machine maintenance.Machine
	AgentID string
}

// AnswerInverseOffers answers a framework's inverse offers: every id must
// be an outstanding inverse offer of the framework, or nothing changes and
// the error names the first that is not. Each answered offer is forgotten
// and the framework gets the next one for the agent after refuse, if it
// still uses it. The answers are recorded in the maintenance state (for
// GetMaintenanceStatus and the automatic DOWN) with status, and returned.
func (k *Core) AnswerInverseOffers(frameworkID string, ids []string, refuse time.Duration, status maintenance.Status, now time.Time) ([]Answer, error) {
	offers := make([]*InverseOffer, 0, len(ids))
	for _, id := range ids {
		io := k.inverse[id]
		if io == nil || io.FrameworkID != frameworkID {
			return nil, fmt.Errorf("inverse offer %q is %w", id, ErrUnknownInverseOffer)
		}
		offers = append(offers, io)
	}
	answers := make([]Answer, 0, len(offers))
	for _, io := range offers {
		k.removeInverseOffer(io)
		if a := k.agents[io.AgentID]; a != nil {
			a.inverseRefuse[frameworkID] = now.Add(refuse)
		}
		k.maint.RecordAnswer(io.Machine, frameworkID, status, now)
		answers = append(answers, Answer{Machine: io.Machine, AgentID: io.AgentID})
	}
	return answers, nil
}
