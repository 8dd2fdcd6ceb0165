package main

import (
	"errors"
	"fmt"
	"strconv"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// newSetCommand is "set ...": changes to roles.
func newSetCommand(g *globals) *cobra.Command {
	set := &cobra.Command{
		Use:   "set",
		Short: "Set role weights and quotas",
		Args:  cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("set: want weight or quota")
			}
			return fmt.Errorf("set: unknown setting %q: want weight or quota", args[0])
		},
	}

	weight := &cobra.Command{
		Use:   "weight ROLE WEIGHT",
		Short: "Set a role's weight (a positive number; the default is 1)",
		Args:  exactArgs("ROLE WEIGHT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			role, value := args[0], args[1]
			if role == "" {
				return errors.New("set weight: the role is empty")
			}
			w, err := strconv.ParseFloat(value, 64)
			if err != nil || !(w > 0) || !resources.IsFinite(w) {
				return fmt.Errorf("set weight: weight %q: must be a positive finite number", value)
			}
			resp, err := g.operator().UpdateWeights(cmd.Context(), connect.NewRequest(&slacklinev1.UpdateWeightsRequest{
				Weights: []*slacklinev1.WeightInfo{{Role: role, Weight: w}},
			}))
			if err != nil {
				return fmt.Errorf("set weight: %w", err)
			}
			if g.structured() {
				return g.print(resp.Msg, table{})
			}
			_, err = fmt.Fprintf(g.out, "role %s: weight set to %s\n", escape(role), strconv.FormatFloat(w, 'g', -1, 64))
			return err
		},
	}

	quota := &cobra.Command{
		Use:   "quota ROLE RESOURCES",
		Short: `Set a role's quota, e.g. "cpus:10;mem:20480"; "" removes it`,
		Args:  exactArgs("ROLE RESOURCES"),
		RunE: func(cmd *cobra.Command, args []string) error {
			role, value := args[0], args[1]
			if role == "" {
				return errors.New("set quota: the role is empty")
			}
			limits, err := resources.Parse(value)
			if err != nil {
				return fmt.Errorf("set quota: %w", err)
			}
			if len(limits.Ports()) > 0 {
				return errors.New("set quota: quota limits scalar resources (cpus, mem, disk), not ports")
			}
			resp, err := g.operator().UpdateQuota(cmd.Context(), connect.NewRequest(&slacklinev1.UpdateQuotaRequest{
				Configs: []*slacklinev1.QuotaConfig{{Role: role, Limits: limits.Proto("", resources.Regular)}},
			}))
			if err != nil {
				return fmt.Errorf("set quota: %w", err)
			}
			if g.structured() {
				return g.print(resp.Msg, table{})
			}
			if limits.IsEmpty() {
				_, err = fmt.Fprintf(g.out, "role %s: quota removed\n", escape(role))
			} else {
				_, err = fmt.Fprintf(g.out, "role %s: quota set to %s\n", escape(role), limits)
			}
			return err
		},
	}

	set.AddCommand(weight, quota)
	return set
}
