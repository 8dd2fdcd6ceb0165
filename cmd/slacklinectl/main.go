package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand(os.Stdout).ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "slacklinectl: %s\n", escapeText(err.Error()))
		stop()
		os.Exit(exitCode(err))
	}
}
