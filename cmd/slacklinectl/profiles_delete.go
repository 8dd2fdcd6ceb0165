package main

import (
	"fmt"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// newProfilesDeleteCommands are "profiles delete NAME" and "profiles abort
// NAME" (#29): removing a profile, and stopping its rollout under way.
func newProfilesDeleteCommands(g *globals, client func() slacklinev1connect.ProfileServiceClient) []*cobra.Command {
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a profile and its history: its agents go to the profile they then match, or to their own flags",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := client().DeleteProfile(cmd.Context(), connect.NewRequest(&slacklinev1.DeleteProfileRequest{Name: args[0]}))
			if err != nil {
				return fmt.Errorf("profiles delete: %w", err)
			}
			return g.print(resp.Msg, profilesTable([]*slacklinev1.Profile{resp.Msg.GetProfile()}))
		},
	}
	abort := &cobra.Command{
		Use:   "abort NAME",
		Short: "Abort a profile's rollout under way: the agents it moved go back to the stable version",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := client().AbortRollout(cmd.Context(), connect.NewRequest(&slacklinev1.AbortRolloutRequest{Name: args[0]}))
			if err != nil {
				return fmt.Errorf("profiles abort: %w", err)
			}
			return g.print(resp.Msg, profilesTable([]*slacklinev1.Profile{resp.Msg.GetProfile()}))
		},
	}
	return []*cobra.Command{del, abort}
}
