package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/slackline/slackline/internal/cliconfig"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "slackline-backtest:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "slackline-backtest",
		Short:         "Replay recorded usage traces through the resource estimators, or record new traces",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       cliconfig.Version("slackline-backtest"),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(newRunCommand(), newMemoryCommand(), newRecordCommand(), newPlotCommand())
	return root
}
