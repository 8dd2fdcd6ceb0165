package auth

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// ReloadOnHangup re-reads the authorization file each time the process
// receives SIGHUP, until ctx ends; a file that fails to load is logged and
// the previous policy stays. It does nothing for a nil Authorizer.
func (a *Authorizer) ReloadOnHangup(ctx context.Context, log *slog.Logger) {
	if a == nil {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := a.Reload(); err != nil {
				log.Error("reload authorization file; keeping the previous one", "err", err)
			} else {
				log.Info("reloaded authorization file", "file", a.file)
			}
		}
	}
}
