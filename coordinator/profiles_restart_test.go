package coordinator

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/etcdtest"
)

// TestRestartKeepsProfiles: node profiles, a rollout under way (its
// chosen agents and baseline) and their history survive a restart, and a
// leader change, on each backend (#29).
func TestRestartKeepsProfiles(t *testing.T) {
	t.Parallel()
	t.Run("bbolt", func(t *testing.T) {
		dir := t.TempDir()
		testRestartKeepsProfiles(t, func() Config { return wallConfig(dir) })
	})
	t.Run("etcd", func(t *testing.T) {
		etcdtest.Require(t)
		client := etcdtest.Shared(t).Client(t)
		prefix := etcdtest.Prefix(t)
		testRestartKeepsProfiles(t, func() Config {
			cfg := wallConfig(t.TempDir()) // the work dir is unused with a store
			cfg.Store = store.NewEtcd(client, store.EtcdOptions{Prefix: prefix})
			return cfg
		})
	})
}

func testRestartKeepsProfiles(t *testing.T, config func() Config) {
	ctx := context.Background()
	tc := startCluster(t, config())
	for _, h := range []string{"web-1", "web-2"} {
		tc.registerAgent(h, "cpus:4;mem:4096")
	}
	svc := profileService{tc.c}
	if _, err := svc.ApplyProfile(ctx, connect.NewRequest(&slacklinev1.ApplyProfileRequest{
		Name: "web", Settings: "estimator-target-violation: 0.01"})); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.RolloutProfile(ctx, connect.NewRequest(&slacklinev1.RolloutProfileRequest{
		Name: "web", Settings: "estimator-target-violation: 0.02",
		Policy: &slacklinev1.ProfileRolloutPolicy{Waves: []float64{0.5, 1}, Soak: durationpb.New(time.Hour), ShadowSoak: durationpb.New(0)}})); err != nil {
		t.Fatal(err)
	}
	before, err := svc.GetProfiles(ctx, connect.NewRequest(&slacklinev1.GetProfilesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	tc.stop()

	tc2 := startCluster(t, config())
	after, err := profileService{tc2.c}.GetProfiles(ctx, connect.NewRequest(&slacklinev1.GetProfilesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	// The rollout's latest comparison is status, recomputed from the
	// agents' next heartbeats; everything else is the record.
	ignore := protocmp.IgnoreFields(&slacklinev1.ProfileRollout{}, "updated", "others", "paired", "reason")
	if diff := cmp.Diff(before.Msg, after.Msg, protocmp.Transform(), ignore); diff != "" {
		t.Errorf("profiles after restart (-before +after):\n%s", diff)
	}
	r := after.Msg.GetProfiles()[0].GetRollout()
	if r.GetState() != slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_IN_PROGRESS || len(r.GetHostnames()) != 1 || len(r.GetBaseline()) != 2 {
		t.Errorf("rollout after restart = %v, want in progress on 1 of 2 agents with their baseline", r)
	}

	// A rollout in its shadow stage survives too: its stage, its agents
	// and when it started.
	svc2 := profileService{tc2.c}
	for _, h := range []string{"web-3", "web-4"} {
		tc2.registerAgent(h, "cpus:4;mem:4096") // connected to this coordinator
	}
	if _, err := svc2.AbortRollout(ctx, connect.NewRequest(&slacklinev1.AbortRolloutRequest{Name: "web"})); err != nil {
		t.Fatal(err)
	}
	if _, err := svc2.RolloutProfile(ctx, connect.NewRequest(&slacklinev1.RolloutProfileRequest{
		Name: "web", Settings: "estimator-target-violation: 0.03",
		Policy: &slacklinev1.ProfileRolloutPolicy{Waves: []float64{0.5, 1}, Soak: durationpb.New(time.Hour), ShadowSoak: durationpb.New(time.Hour)}})); err != nil {
		t.Fatal(err)
	}
	before, err = svc2.GetProfiles(ctx, connect.NewRequest(&slacklinev1.GetProfilesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	tc2.stop()
	tc3 := startCluster(t, config())
	after, err = profileService{tc3.c}.GetProfiles(ctx, connect.NewRequest(&slacklinev1.GetProfilesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before.Msg, after.Msg, protocmp.Transform(), ignore); diff != "" {
		t.Errorf("profiles in a shadow stage after restart (-before +after):\n%s", diff)
	}
	r = after.Msg.GetProfiles()[0].GetRollout()
	if r.GetStage() != slacklinev1.ProfileRolloutStage_PROFILE_ROLLOUT_STAGE_SHADOW || len(r.GetShadowHostnames()) != 1 || len(r.GetHostnames()) != 0 ||
		r.GetShadowStartTime() == nil || r.GetPolicy().GetShadowSoak().AsDuration() != time.Hour {
		t.Errorf("rollout after restart = %v, want its shadow stage on 1 of 2 agents, none live", r)
	}
}
