package coordinator

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/coordinator/profiles"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
)

// AbortRollout implements ProfileService: the rollout under way stops and
// its agents go back to the stable version, persisted before they are
// sent it (changeProfile).
func (s profileService) AbortRollout(ctx context.Context, req *connect.Request[slacklinev1.AbortRolloutRequest]) (*connect.Response[slacklinev1.AbortRolloutResponse], error) {
	name, by, now := req.Msg.GetName(), auth.FromContext(ctx).String(), s.c.cfg.Now()
	if err := profiles.ValidateName(name); err != nil {
		return nil, profileError(err)
	}
	p, err := s.c.changeProfile(ctx, name, func(cur *profiles.Profile, _ []profiles.Signals) (*profiles.Profile, error) {
		return profiles.AbortRollout(cur, name, by, now)
	})
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.AbortRolloutResponse{Profile: profileProto(p)}), nil
}

// DeleteProfile implements ProfileService: the profile's record is
// deleted, then it is dropped and every agent is sent what it then runs
// (the profile it matches next, or its own flags). It takes a turn of
// the profiles' scope and c.mu, as changeProfile does.
func (s profileService) DeleteProfile(ctx context.Context, req *connect.Request[slacklinev1.DeleteProfileRequest]) (*connect.Response[slacklinev1.DeleteProfileResponse], error) {
	c, name := s.c, req.Msg.GetName()
	if err := profiles.ValidateName(name); err != nil {
		return nil, profileError(err)
	}
	defer c.takeTurn(scopeProfiles)()
	c.mu.Lock()
	c.profiles.init()
	cur := c.profiles.byName[name]
	c.mu.Unlock()
	if cur == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("profile %q: no such profile", name))
	}
	if err := c.persist(ctx, "profile delete", store.Delete(store.BucketProfiles, name)); err != nil {
		return nil, err
	}
	c.mu.Lock()
	delete(c.profiles.byName, name)
	c.sendProfiles()
	c.mu.Unlock()
	c.log.Info("profile deleted", "profile", name, "by", auth.FromContext(ctx).String(), "stable", cur.Stable.Number)
	return connect.NewResponse(&slacklinev1.DeleteProfileResponse{Profile: profileProto(cur)}), nil
}
