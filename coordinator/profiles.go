package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/agent/settings"
	"github.com/slackline/slackline/coordinator/profiles"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
)

// Node profiles (#29): the shell around coordinator/profiles. The
// profiles, the agents' latest reports and what was sent to each agent
// are in-memory state under c.mu; a change an operator asks for is
// decided and written in a turn of the profiles' scope (plan, persist,
// apply, answer; order.go), and a rollout's own decisions (JudgeRollouts,
// at the time it is given) are decided, written and applied in one too.

// profileRolloutTick is how often rollouts are judged by default
// (Config.RolloutInterval).
const profileRolloutTick = time.Second

// profileBook is the coordinator's profile state (under c.mu).
type profileBook struct {
	byName map[string]*profiles.Profile
	// reports are the agents' latest heartbeat reports, by agent id.
	reports map[string]*slacklinev1.ProfileReport
	// sent is, by agent id, the assignment last sent to its session;
	// sentShadow the rollout shadow last sent (profile "": stop).
	sent       map[string]profileSent
	sentShadow map[string]profileSent
}

type profileSent struct {
	session string
	profile string
	version uint64
}

func (b *profileBook) init() {
	if b.byName == nil {
		b.byName = map[string]*profiles.Profile{}
		b.reports = map[string]*slacklinev1.ProfileReport{}
		b.sent = map[string]profileSent{}
		b.sentShadow = map[string]profileSent{}
	}
}

func (b *profileBook) list() []*profiles.Profile {
	out := slices.Collect(maps.Values(b.byName))
	slices.SortFunc(out, func(x, y *profiles.Profile) int {
		switch {
		case x.Name < y.Name:
			return -1
		case x.Name > y.Name:
			return 1
		}
		return 0
	})
	return out
}

// recoverProfile restores a profile record.
func (c *Coordinator) recoverProfile(name string, raw []byte) error {
	var rec slacklinev1.Profile
	if err := proto.Unmarshal(raw, &rec); err != nil {
		return fmt.Errorf("profile %s: %w", name, err)
	}
	c.profiles.init()
	c.profiles.byName[name] = profileFromProto(&rec)
	return nil
}

// profileBeat records an agent's heartbeat report and sends it its
// assignment when it runs something else and was not sent it in this
// session already (a refused version is not sent again).
func (c *Coordinator) profileBeat(a *agent, report *slacklinev1.ProfileReport) {
	c.profiles.init()
	if report != nil {
		c.profiles.reports[a.ID] = report
	}
	c.sendProfile(a)
}

// sendProfile sends agent a the profile version it should run, unless it
// runs it or its session was sent it.
func (c *Coordinator) sendProfile(a *agent) {
	if a.session == nil || len(c.profiles.byName) == 0 && c.profiles.reports[a.ID].GetProfile() == "" && c.profiles.reports[a.ID].GetShadowProfile() == "" {
		return
	}
	p := profiles.Select(c.profiles.list(), attributeMap(a.Info))
	want := profiles.Assign(p, a.Info.GetHostname())
	r := c.profiles.reports[a.ID]
	defer c.sendProfileShadow(a, p, r)
	if r != nil && r.GetProfile() == want.Profile && r.GetVersion() == want.Version.Number {
		return
	}
	sent := profileSent{session: a.session.id, profile: want.Profile, version: want.Version.Number}
	if c.profiles.sent[a.ID] == sent {
		return
	}
	c.profiles.sent[a.ID] = sent
	a.send(&slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ApplyProfile{ApplyProfile: &slacklinev1.ProfileApplyCommand{
		Profile: want.Profile, Version: want.Version.Number, Settings: want.Version.Settings,
	}}})
}

// sendProfiles sends every connected agent its assignment.
func (c *Coordinator) sendProfiles() {
	for _, a := range c.agents {
		c.sendProfile(a)
	}
}

// profileFleet is the latest signals of the connected agents that run p
// (those Select gives p).
func (c *Coordinator) profileFleet(p *profiles.Profile, all []*profiles.Profile) []profiles.Signals {
	var fleet []profiles.Signals
	for _, a := range c.agents {
		if a.session == nil || profiles.Select(all, attributeMap(a.Info)) != p {
			continue
		}
		fleet = append(fleet, signalsOf(a.Info.GetHostname(), p.Name, c.profiles.reports[a.ID]))
	}
	slices.SortFunc(fleet, func(x, y profiles.Signals) int {
		switch {
		case x.Host < y.Host:
			return -1
		case x.Host > y.Host:
			return 1
		}
		return 0
	})
	return fleet
}

func signalsOf(host, profile string, r *slacklinev1.ProfileReport) profiles.Signals {
	s := profiles.Signals{Host: host, Profile: r.GetProfile(), Version: r.GetVersion(),
		Scored: r.GetEstimatesScored(), Violations: r.GetViolations(),
		RunqP99:  time.Duration(r.GetRunqueueP99Seconds() * float64(time.Second)),
		Reported: r != nil, ShadowCapable: r.GetShadowCapable()}
	if r.GetRefusedProfile() == profile {
		s.Refused = r.GetRefusedVersion()
	}
	if r.GetShadowProfile() != "" {
		s.Shadow = profiles.ShadowSignals{Profile: r.GetShadowProfile(), Version: r.GetShadowVersion(),
			Scored: r.GetShadowEstimatesScored(), Violations: r.GetShadowViolations(),
			ActiveScored: r.GetShadowActiveEstimatesScored(), ActiveViolations: r.GetShadowActiveViolations()}
	}
	if r.GetShadowRefusedProfile() == profile {
		s.Shadow.Refused = r.GetShadowRefusedVersion()
	}
	return s
}

// runProfiles judges the rollouts under way every Config.RolloutInterval,
// at Config.Now's time, until ctx ends (it returns at once with a negative
// interval: JudgeRollouts is then the only judge).
func (c *Coordinator) runProfiles(ctx context.Context) error {
	if c.cfg.RolloutInterval < 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	tick := time.NewTicker(c.cfg.RolloutInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		c.JudgeRollouts(ctx, c.cfg.Now())
	}
}

// JudgeRollouts judges every profile rollout under way once, at now: the
// rollouts' decisions (profiles.Step) depend on the time they are given
// and the agents' latest reports only, never on a clock. Run calls it
// every Config.RolloutInterval with Config.Now's time; with a negative
// interval the caller does, on a clock of its own (a test moves a
// rollout past its soak by judging it at a later time, without waiting).
//
// A decision (next wave, rollback, completion) is made durable first and
// only then applied (agents sent their new assignments), as changeProfile
// does: a decision that could not be persisted is not acted on, and the
// next judgement decides again. It returns once applied. It takes a turn
// of the profiles' scope and c.mu.
func (c *Coordinator) JudgeRollouts(ctx context.Context, now time.Time) {
	defer c.takeTurn(scopeProfiles)()
	var decided []*profiles.Profile
	c.mu.Lock()
	c.profiles.init()
	for id := range c.profiles.reports {
		if c.agents[id] == nil {
			delete(c.profiles.reports, id)
			delete(c.profiles.sent, id)
			delete(c.profiles.sentShadow, id)
		}
	}
	all := c.profiles.list()
	for _, p := range all {
		if p.Rollout == nil || p.Rollout.State != profiles.RolloutInProgress {
			continue
		}
		next, outcome := profiles.Step(p, now, c.profileFleet(p, all))
		switch {
		case next == p:
		case outcome == profiles.Unchanged:
			c.profiles.byName[p.Name] = next // its status only
		default:
			c.log.Info("profile rollout", "profile", p.Name, "version", next.Rollout.Candidate.Number, "outcome", outcome.String(),
				"wave", next.Rollout.Wave+1, "reason", next.Rollout.Reason)
			decided = append(decided, next)
		}
	}
	c.mu.Unlock()
	if len(decided) == 0 {
		return
	}
	writes := make([]store.Mutation, 0, len(decided))
	for _, p := range decided {
		writes = append(writes, profileRecord(p))
	}
	if err := c.persist(ctx, "profile rollout", writes...); err != nil {
		c.log.Warn("profile rollout decisions not persisted: not applied, decided again at the next judgement", "err", err)
		return
	}
	c.mu.Lock()
	for _, p := range decided {
		c.profiles.byName[p.Name] = p
	}
	c.sendProfiles()
	c.mu.Unlock()
}

func profileRecord(p *profiles.Profile) store.Mutation {
	return store.Put(store.BucketProfiles, p.Name, mustMarshal(profileProto(p)))
}

type profileService struct{ c *Coordinator }

// profileError maps the pure package's errors to codes.
func profileError(err error) error {
	switch {
	case errors.Is(err, profiles.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, profiles.ErrNotFound):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, profiles.ErrFailedPrecondition):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return err
}

// changeProfile decides a change of the named profile with decide, makes
// it durable and applies it (sending agents their new assignments). It
// takes a turn of the profiles' scope and c.mu.
func (c *Coordinator) changeProfile(ctx context.Context, name string, decide func(cur *profiles.Profile, fleet []profiles.Signals) (*profiles.Profile, error)) (*profiles.Profile, error) {
	defer c.takeTurn(scopeProfiles)()
	c.mu.Lock()
	c.profiles.init()
	cur := c.profiles.byName[name]
	count := len(c.profiles.byName)
	var fleet []profiles.Signals
	if cur != nil {
		fleet = c.profileFleet(cur, c.profiles.list())
	}
	c.mu.Unlock()
	if cur == nil && count >= profiles.MaxProfiles {
		c.bounds.hit("profiles", "profile refused: the coordinator holds as many profiles as it may")
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("name %s: the coordinator holds %d profiles, at most %d", name, count, profiles.MaxProfiles))
	}
	next, err := decide(cur, fleet)
	if err != nil {
		return nil, profileError(err)
	}
	if err := c.persist(ctx, "profile", profileRecord(next)); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.profiles.byName[name] = next
	c.sendProfiles()
	c.mu.Unlock()
	last := next.History[len(next.History)-1]
	c.log.Info("profile changed", "profile", name, "by", last.By, "change", last.What)
	return next, nil
}

// ApplyProfile implements ProfileService.
func (s profileService) ApplyProfile(ctx context.Context, req *connect.Request[slacklinev1.ApplyProfileRequest]) (*connect.Response[slacklinev1.ApplyProfileResponse], error) {
	m, by, now := req.Msg, auth.FromContext(ctx).String(), s.c.cfg.Now()
	p, err := s.c.changeProfile(ctx, m.GetName(), func(cur *profiles.Profile, _ []profiles.Signals) (*profiles.Profile, error) {
		return profiles.Apply(cur, m.GetName(), m.GetSelector(), m.GetSettings(), by, now, validateProfileSettings(m.GetName()))
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.ApplyProfileResponse{Profile: profileProto(p)}), nil
}

// RolloutProfile implements ProfileService.
func (s profileService) RolloutProfile(ctx context.Context, req *connect.Request[slacklinev1.RolloutProfileRequest]) (*connect.Response[slacklinev1.RolloutProfileResponse], error) {
	m, by, now := req.Msg, auth.FromContext(ctx).String(), s.c.cfg.Now()
	if err := profiles.ValidateName(m.GetName()); err != nil {
		return nil, profileError(err)
	}
	policy := policyFromProto(m.GetPolicy())
	p, err := s.c.changeProfile(ctx, m.GetName(), func(cur *profiles.Profile, fleet []profiles.Signals) (*profiles.Profile, error) {
		return profiles.StartRollout(cur, m.GetSettings(), policy, by, now, fleet, validateProfileSettings(m.GetName()))
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.RolloutProfileResponse{Profile: profileProto(p)}), nil
}

// validateProfileSettings is the agent's own validation of a profile's
// settings.
func validateProfileSettings(name string) func(string) error {
	return func(data string) error { return settings.ValidateProfile(name, data) }
}

// GetProfiles implements ProfileService.
func (s profileService) GetProfiles(ctx context.Context, req *connect.Request[slacklinev1.GetProfilesRequest]) (*connect.Response[slacklinev1.GetProfilesResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	resp := &slacklinev1.GetProfilesResponse{}
	for _, p := range c.profiles.list() {
		if req.Msg.GetName() == "" || p.Name == req.Msg.GetName() {
			resp.Profiles = append(resp.Profiles, profileProto(p))
		}
	}
	if req.Msg.GetName() != "" && len(resp.Profiles) == 0 {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("profile %q: no such profile", req.Msg.GetName()))
	}
	return connect.NewResponse(resp), nil
}

// GetProfileStatus implements ProfileService.
func (s profileService) GetProfileStatus(ctx context.Context, req *connect.Request[slacklinev1.GetProfileStatusRequest]) (*connect.Response[slacklinev1.GetProfileStatusResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.profiles.byName[req.Msg.GetName()]
	if p == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("profile %q: no such profile", req.Msg.GetName()))
	}
	all := c.profiles.list()
	resp := &slacklinev1.GetProfileStatusResponse{Profile: profileProto(p)}
	for _, a := range c.agents {
		if profiles.Select(all, attributeMap(a.Info)) != p {
			continue
		}
		r := c.profiles.reports[a.ID]
		st := &slacklinev1.ProfileAgentStatus{AgentId: a.ID, Hostname: a.Info.GetHostname(),
			AssignedVersion: profiles.Assign(p, a.Info.GetHostname()).Version.Number,
			Signals:         signalsProto(signalsOf(a.Info.GetHostname(), p.Name, r))}
		if r.GetRefusedProfile() == p.Name {
			st.Refusal = r.GetRefusal()
		}
		if shadow, ok := profiles.AssignShadow(p, a.Info.GetHostname()); ok {
			st.ShadowAssigned, st.AssignedShadowVersion = true, shadow.Version.Number
		}
		if r.GetShadowRefusedProfile() == p.Name {
			st.ShadowRefusal = r.GetShadowRefusal()
		}
		resp.Agents = append(resp.Agents, st)
	}
	slices.SortFunc(resp.Agents, func(x, y *slacklinev1.ProfileAgentStatus) int {
		switch {
		case x.GetHostname()+x.GetAgentId() < y.GetHostname()+y.GetAgentId():
			return -1
		case x.GetHostname()+x.GetAgentId() > y.GetHostname()+y.GetAgentId():
			return 1
		}
		return 0
	})
	return connect.NewResponse(resp), nil
}

// Conversions between the pure values and their protos (the records).

func versionProto(v profiles.Version) *slacklinev1.ProfileVersion {
	pv := &slacklinev1.ProfileVersion{Number: v.Number, Settings: v.Settings, By: v.By}
	if !v.At.IsZero() {
		pv.Time = timestamppb.New(v.At)
	}
	return pv
}

func versionFromProto(pv *slacklinev1.ProfileVersion) profiles.Version {
	v := profiles.Version{Number: pv.GetNumber(), Settings: pv.GetSettings(), By: pv.GetBy()}
	if pv.GetTime() != nil {
		v.At = pv.GetTime().AsTime()
	}
	return v
}

func timeProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func timeFromProto(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

func groupProto(g profiles.Group) *slacklinev1.ProfileGroup {
	return &slacklinev1.ProfileGroup{Agents: uint32(g.Agents), EstimatesScored: g.Scored, Violations: g.Violations, RunqueueP99: durationpb.New(g.RunqP99)}
}

func groupFromProto(g *slacklinev1.ProfileGroup) profiles.Group {
	return profiles.Group{Agents: int(g.GetAgents()), Scored: g.GetEstimatesScored(), Violations: g.GetViolations(), RunqP99: g.GetRunqueueP99().AsDuration()}
}

func signalsProto(s profiles.Signals) *slacklinev1.ProfileAgentSignals {
	return &slacklinev1.ProfileAgentSignals{Hostname: s.Host, Profile: s.Profile, Version: s.Version, RefusedVersion: s.Refused,
		EstimatesScored: s.Scored, Violations: s.Violations, RunqueueP99: durationpb.New(s.RunqP99),
		Reported: s.Reported, ShadowCapable: s.ShadowCapable, ShadowProfile: s.Shadow.Profile, ShadowVersion: s.Shadow.Version,
		ShadowEstimatesScored: s.Shadow.Scored, ShadowViolations: s.Shadow.Violations,
		ActiveEstimatesScored: s.Shadow.ActiveScored, ActiveViolations: s.Shadow.ActiveViolations, ShadowRefusedVersion: s.Shadow.Refused}
}

func signalsFromProto(s *slacklinev1.ProfileAgentSignals) profiles.Signals {
	return profiles.Signals{Host: s.GetHostname(), Profile: s.GetProfile(), Version: s.GetVersion(), Refused: s.GetRefusedVersion(),
		Scored: s.GetEstimatesScored(), Violations: s.GetViolations(), RunqP99: s.GetRunqueueP99().AsDuration(),
		Reported: s.GetReported(), ShadowCapable: s.GetShadowCapable(),
		Shadow: profiles.ShadowSignals{Profile: s.GetShadowProfile(), Version: s.GetShadowVersion(),
			Scored: s.GetShadowEstimatesScored(), Violations: s.GetShadowViolations(),
			ActiveScored: s.GetActiveEstimatesScored(), ActiveViolations: s.GetActiveViolations(), Refused: s.GetShadowRefusedVersion()}}
}

func policyProto(p profiles.Policy) *slacklinev1.ProfileRolloutPolicy {
	return &slacklinev1.ProfileRolloutPolicy{Waves: p.Waves, Soak: durationpb.New(p.Soak), MinEstimatesScored: p.MinScored,
		ViolationTolerance: p.ViolationTolerance, RunqueueP99Tolerance: p.RunqP99Tolerance, RunqueueP99Floor: durationpb.New(p.RunqP99Floor),
		ShadowSoak: durationpb.New(p.ShadowSoak)}
}

// policyFromProto is a request's policy: unset fields take
// DefaultPolicy's.
func policyFromProto(pp *slacklinev1.ProfileRolloutPolicy) profiles.Policy {
	p := profiles.DefaultPolicy()
	if pp == nil {
		return p
	}
	if len(pp.GetWaves()) > 0 {
		p.Waves = slices.Clone(pp.GetWaves())
	}
	if pp.Soak != nil {
		p.Soak = pp.GetSoak().AsDuration()
	}
	if pp.MinEstimatesScored != 0 {
		p.MinScored = pp.GetMinEstimatesScored()
	}
	if pp.ViolationTolerance != 0 {
		p.ViolationTolerance = pp.GetViolationTolerance()
	}
	if pp.RunqueueP99Tolerance != 0 {
		p.RunqP99Tolerance = pp.GetRunqueueP99Tolerance()
	}
	if pp.RunqueueP99Floor != nil {
		p.RunqP99Floor = pp.GetRunqueueP99Floor().AsDuration()
	}
	if pp.ShadowSoak != nil {
		p.ShadowSoak = pp.GetShadowSoak().AsDuration() // 0: no shadow stage
	}
	return p
}

var rolloutStates = map[profiles.RolloutState]slacklinev1.ProfileRolloutState{
	profiles.RolloutInProgress: slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_IN_PROGRESS,
	profiles.RolloutDone:       slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_DONE,
	profiles.RolloutRolledBack: slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_ROLLED_BACK,
	profiles.RolloutAborted:    slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_ABORTED,
}

func profileProto(p *profiles.Profile) *slacklinev1.Profile {
	pp := &slacklinev1.Profile{Name: p.Name, Selector: maps.Clone(p.Selector), Stable: versionProto(p.Stable), LastVersion: p.LastVersion}
	for _, h := range p.History {
		pp.History = append(pp.History, &slacklinev1.ProfileChange{Time: timeProto(h.At), By: h.By, What: h.What})
	}
	if r := p.Rollout; r != nil {
		pr := &slacklinev1.ProfileRollout{
			Candidate: versionProto(r.Candidate), Previous: versionProto(r.Previous), Policy: policyProto(r.Policy),
			State: rolloutStates[r.State], Wave: uint32(r.Wave), WaveStartTime: timeProto(r.WaveStarted),
			Hostnames: slices.Clone(r.Hosts), Updated: groupProto(r.Updated), Others: groupProto(r.Others),
			StartTime: timeProto(r.StartedAt), EndTime: timeProto(r.EndedAt), By: r.By, Reason: r.Reason,
			Stage: stageProto(r.Stage), ShadowHostnames: slices.Clone(r.ShadowHosts), ShadowStartTime: timeProto(r.ShadowStarted),
			Paired: &slacklinev1.ProfilePaired{Agents: uint32(r.Paired.Agents), Shadow: groupProto(r.Paired.Shadow), Live: groupProto(r.Paired.Live),
				WithoutShadows: slices.Clone(r.Paired.WithoutShadows)},
		}
		for _, h := range slices.Sorted(maps.Keys(r.Baseline)) {
			pr.Baseline = append(pr.Baseline, signalsProto(r.Baseline[h]))
		}
		if r.Reference != nil {
			pr.Reference = groupProto(*r.Reference)
		}
		pp.Rollout = pr
	}
	return pp
}

func profileFromProto(pp *slacklinev1.Profile) *profiles.Profile {
	p := &profiles.Profile{Name: pp.GetName(), Selector: maps.Clone(pp.GetSelector()), Stable: versionFromProto(pp.GetStable()), LastVersion: pp.GetLastVersion()}
	for _, h := range pp.GetHistory() {
		p.History = append(p.History, profiles.Change{At: timeFromProto(h.GetTime()), By: h.GetBy(), What: h.GetWhat()})
	}
	if pr := pp.GetRollout(); pr != nil {
		r := &profiles.Rollout{
			Candidate: versionFromProto(pr.GetCandidate()), Previous: versionFromProto(pr.GetPrevious()),
			Policy: policyFromProto(pr.GetPolicy()), Wave: int(pr.GetWave()), WaveStarted: timeFromProto(pr.GetWaveStartTime()),
			Hosts: slices.Clone(pr.GetHostnames()), Updated: groupFromProto(pr.GetUpdated()), Others: groupFromProto(pr.GetOthers()),
			StartedAt: timeFromProto(pr.GetStartTime()), EndedAt: timeFromProto(pr.GetEndTime()), By: pr.GetBy(), Reason: pr.GetReason(),
			Baseline:    map[string]profiles.Signals{},
			ShadowHosts: slices.Clone(pr.GetShadowHostnames()), ShadowStarted: timeFromProto(pr.GetShadowStartTime()),
			Paired: profiles.Paired{Agents: int(pr.GetPaired().GetAgents()), Shadow: groupFromProto(pr.GetPaired().GetShadow()),
				Live: groupFromProto(pr.GetPaired().GetLive()), WithoutShadows: slices.Clone(pr.GetPaired().GetWithoutShadows())},
		}
		if pr.GetStage() == slacklinev1.ProfileRolloutStage_PROFILE_ROLLOUT_STAGE_SHADOW {
			r.Stage = profiles.StageShadow
		}
		for st, ps := range rolloutStates {
			if ps == pr.GetState() {
				r.State = st
			}
		}
		for _, s := range pr.GetBaseline() {
			r.Baseline[s.GetHostname()] = signalsFromProto(s)
		}
		if pr.GetReference() != nil {
			ref := groupFromProto(pr.GetReference())
			r.Reference = &ref
		}
		p.Rollout = r
	}
	return p
}

func stageProto(s profiles.Stage) slacklinev1.ProfileRolloutStage {
	if s == profiles.StageShadow {
		return slacklinev1.ProfileRolloutStage_PROFILE_ROLLOUT_STAGE_SHADOW
	}
	return slacklinev1.ProfileRolloutStage_PROFILE_ROLLOUT_STAGE_LIVE
}

// attributeMap is an agent's attributes as a selector sees them.
func attributeMap(info *slacklinev1.AgentInfo) map[string]string {
	m := make(map[string]string, len(info.GetAttributes()))
	for _, attr := range info.GetAttributes() {
		m[attr.GetName()] = attr.GetValue()
	}
	return m
}
