package main

import (
	"context"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// fakeProfileRemovals answers DeleteProfile and AbortRollout with profile,
// recording the names asked for.
type fakeProfileRemovals struct {
	fakeProfiles
	rmu             sync.Mutex
	deleted, abortd []string
}

func (f *fakeProfileRemovals) DeleteProfile(_ context.Context, req *connect.Request[slacklinev1.DeleteProfileRequest]) (*connect.Response[slacklinev1.DeleteProfileResponse], error) {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	f.deleted = append(f.deleted, req.Msg.GetName())
	return connect.NewResponse(&slacklinev1.DeleteProfileResponse{Profile: f.profile}), nil
}

func (f *fakeProfileRemovals) AbortRollout(_ context.Context, req *connect.Request[slacklinev1.AbortRolloutRequest]) (*connect.Response[slacklinev1.AbortRolloutResponse], error) {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	f.abortd = append(f.abortd, req.Msg.GetName())
	if req.Msg.GetName() == "idle" {
		return nil, connect.NewError(connect.CodeFailedPrecondition, nil)
	}
	return connect.NewResponse(&slacklinev1.AbortRolloutResponse{Profile: f.profile}), nil
}

// TestProfilesDeleteAndAbort: "profiles delete NAME" and "profiles abort
// NAME" send the name and print the profile; a refusal is an error naming
// the command; a missing NAME is refused before any call.
func TestProfilesDeleteAndAbort(t *testing.T) {
	t.Parallel()
	f := &fakeProfileRemovals{fakeProfiles: fakeProfiles{profile: rolledBack()}}
	url := serveProfiles(t, f)
	out, err := run(t, "--coordinator", url, "profiles", "delete", "web")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "web") || !strings.Contains(out, "tier=web") {
		t.Errorf("delete output:\n%s\nwant the profile's row", out)
	}
	if _, err := run(t, "--coordinator", url, "profiles", "abort", "web"); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "--coordinator", url, "profiles", "abort", "idle"); err == nil || !strings.Contains(err.Error(), "profiles abort") {
		t.Errorf("abort refused by the coordinator: err %v, want one naming profiles abort", err)
	}
	for _, args := range [][]string{{"profiles", "delete"}, {"profiles", "abort"}, {"profiles", "abort", "a", "b"}} {
		if _, err := run(t, append([]string{"--coordinator", url}, args...)...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	f.rmu.Lock()
	defer f.rmu.Unlock()
	if strings.Join(f.deleted, ",") != "web" || strings.Join(f.abortd, ",") != "web,idle" {
		t.Errorf("deleted %v, aborted %v; want [web] and [web idle]", f.deleted, f.abortd)
	}
}
