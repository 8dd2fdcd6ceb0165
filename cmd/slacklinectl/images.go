package main

import (
	"fmt"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// newImagesCommand lists one agent's cached images (#27).
func newImagesCommand(g *globals) *cobra.Command {
	var agent agentFlags
	cmd := &cobra.Command{
		Use:     "images (--agent ID | --hostname H)",
		Aliases: []string{"image"},
		Short:   "List the images cached on one agent, its image store's use of its disk budget and its recent pull failures",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			agentID, err := agent.agent(cmd.Context(), g)
			if err != nil {
				return fmt.Errorf("get images: %w", err)
			}
			resp, err := g.node(agentID).GetImages(cmd.Context(), connect.NewRequest(&slacklinev1.GetImagesRequest{}))
			if err != nil {
				return fmt.Errorf("get images: %w", err)
			}
			if err := g.print(resp.Msg, imageTable(resp.Msg)); err != nil || g.output == outputJSON {
				return err
			}
			m := resp.Msg
			budget := "unbounded"
			if m.GetBudgetBytes() > 0 {
				budget = mib(m.GetBudgetBytes())
			}
			fmt.Fprintf(g.out, "\nstore: %s in %d layers, budget %s\n", mib(m.GetStoreBytes()), m.GetLayers(), budget)
			if errs := m.GetRecentErrors(); len(errs) > 0 {
				fmt.Fprintln(g.out, "\nrecent pull failures:")
				t := table{header: []string{"TIME", "IMAGE", "ERROR"}}
				for _, e := range errs {
					t.rows = append(t.rows, []string{e.GetTime().AsTime().UTC().Format(time.RFC3339), e.GetReference(), e.GetMessage()})
				}
				return t.write(g.out)
			}
			return nil
		},
	}
	agent.register(cmd)
	return cmd
}

func imageTable(m *slacklinev1.GetImagesResponse) table {
	t := table{header: []string{"IMAGE", "DIGEST", "SIZE", "LAYERS", "TASKS", "LAST USED"}}
	for _, img := range m.GetImages() {
		digest := img.GetDigest()
		if len(digest) > 19 {
			digest = digest[:19] // sha256: and 12 hex digits, as docker prints
		}
		t.rows = append(t.rows, []string{img.GetReference(), digest, mib(img.GetSizeBytes()),
			strconv.Itoa(int(img.GetLayers())), strconv.Itoa(int(img.GetTasks())),
			img.GetLastUsedTime().AsTime().UTC().Format(time.RFC3339)})
	}
	return t
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
