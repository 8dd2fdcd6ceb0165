package coordinator

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestDeleteProfileAndAbortRollout: an operator aborts a rollout under
// way (its agent goes back to the stable version) and deletes a profile;
// both are persisted (a restart keeps the abort and does not bring the
// deleted profile back), and each refuses what it cannot do with the
// code naming why (#29).
func TestDeleteProfileAndAbortRollout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	tc := startCluster(t, wallConfig(dir))
	for _, h := range []string{"web-1", "web-2"} {
		tc.registerAgent(h, "cpus:4;mem:4096")
	}
	svc := profileService{tc.c}
	for _, name := range []string{"web", "db"} {
		if _, err := svc.ApplyProfile(ctx, connect.NewRequest(&slacklinev1.ApplyProfileRequest{
			Name: name, Selector: map[string]string{"tier": name}, Settings: "estimator-target-violation: 0.01"})); err != nil {
			t.Fatal(err)
		}
	}
	code := func(err error) connect.Code { return connect.CodeOf(err) }
	if _, err := svc.AbortRollout(ctx, connect.NewRequest(&slacklinev1.AbortRolloutRequest{Name: "web"})); code(err) != connect.CodeFailedPrecondition {
		t.Errorf("abort without a rollout: %v, want FAILED_PRECONDITION", err)
	}
	if _, err := svc.AbortRollout(ctx, connect.NewRequest(&slacklinev1.AbortRolloutRequest{Name: "nope"})); code(err) != connect.CodeNotFound {
		t.Errorf("abort of a missing profile: %v, want NOT_FOUND", err)
	}
	if _, err := svc.RolloutProfile(ctx, connect.NewRequest(&slacklinev1.RolloutProfileRequest{
		Name: "web", Settings: "estimator-target-violation: 0.02",
		Policy: &slacklinev1.ProfileRolloutPolicy{Waves: []float64{0.5, 1}, Soak: durationpb.New(time.Hour)}})); err != nil {
		t.Fatal(err)
	}
	resp, err := svc.AbortRollout(ctx, connect.NewRequest(&slacklinev1.AbortRolloutRequest{Name: "web"}))
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Msg.GetProfile().GetRollout(); r.GetState() != slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_ABORTED || r.GetEndTime() == nil {
		t.Errorf("rollout after the abort: %v", r)
	}
	del, err := svc.DeleteProfile(ctx, connect.NewRequest(&slacklinev1.DeleteProfileRequest{Name: "db"}))
	if err != nil {
		t.Fatal(err)
	}
	if del.Msg.GetProfile().GetName() != "db" {
		t.Errorf("DeleteProfile answered %v, want db as it was", del.Msg)
	}
	if _, err := svc.DeleteProfile(ctx, connect.NewRequest(&slacklinev1.DeleteProfileRequest{Name: "db"})); code(err) != connect.CodeNotFound {
		t.Errorf("second delete: %v, want NOT_FOUND", err)
	}
	if _, err := svc.DeleteProfile(ctx, connect.NewRequest(&slacklinev1.DeleteProfileRequest{Name: ""})); code(err) != connect.CodeInvalidArgument {
		t.Errorf("delete without a name: %v, want INVALID_ARGUMENT", err)
	}
	tc.stop()

	tc2 := startCluster(t, wallConfig(dir))
	after, err := profileService{tc2.c}.GetProfiles(ctx, connect.NewRequest(&slacklinev1.GetProfilesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	ps := after.Msg.GetProfiles()
	if len(ps) != 1 || ps[0].GetName() != "web" {
		t.Fatalf("profiles after restart: %v, want web only", ps)
	}
	if st := ps[0].GetRollout().GetState(); st != slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_ABORTED {
		t.Errorf("web's rollout after restart: %v, want aborted", st)
	}
}
