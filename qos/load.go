package qos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Load is the "load" controller, Mesos's LoadQoSController: when the 5-minute
// load average exceeds Threshold5Min, or the 15-minute one exceeds
// Threshold15Min, it kills every revocable container at once. The 1-minute
// average is ignored, as in Mesos, being too noisy.
//
// It exists for parity and comparison. Load averages lag minutes behind the
// interference they report, they count guaranteed work's own load and
// threads blocked on I/O, and killing everything at once throws away all
// best-effort progress; while the averages decay, revocable containers
// launched meanwhile are killed too. Prefer "interference".
//
// State: the kills asked for (see Config.KillRetry), so a container being
// killed is not reported again at every evaluation.
type Load struct {
	cfg   LoadConfig
	kills killTracker
}

// NewLoad returns a load controller. It fails when neither threshold is set.
func NewLoad(cfg LoadConfig, killRetry time.Duration) (*Load, error) {
	if cfg.Threshold5Min <= 0 && cfg.Threshold15Min <= 0 {
		return nil, fmt.Errorf("%w: the load controller needs load_threshold_5min or load_threshold_15min", ErrInvalidConfig)
	}
	return &Load{cfg: cfg, kills: newKillTracker(killRetry)}, nil
}

// Evaluate implements Controller.
func (l *Load) Evaluate(in Input) []Correction {
	l.kills.forgetGone(in.Containers)
	var reason string
	switch {
	case l.cfg.Threshold5Min > 0 && in.Node.Load5 > l.cfg.Threshold5Min:
		reason = "5-minute load average " + strconv.FormatFloat(in.Node.Load5, 'f', 2, 64) + " > " + strconv.FormatFloat(l.cfg.Threshold5Min, 'f', -1, 64)
	case l.cfg.Threshold15Min > 0 && in.Node.Load15 > l.cfg.Threshold15Min:
		reason = "15-minute load average " + strconv.FormatFloat(in.Node.Load15, 'f', 2, 64) + " > " + strconv.FormatFloat(l.cfg.Threshold15Min, 'f', -1, 64)
	default:
		return nil
	}
	var out []Correction
	for i := range in.Containers {
		c := &in.Containers[i]
		if !c.correctable() || l.kills.pending(c.ID, in.Now) {
			continue
		}
		l.kills.record(c.ID, in.Now)
		out = append(out, Correction{Kind: Kill, ContainerID: c.ID, TaskID: c.TaskID, Reason: reason, Controller: "load", Signal: in.Now})
	}
	slices.SortFunc(out, func(a, b Correction) int { return strings.Compare(a.ContainerID, b.ContainerID) })
	return out
}
