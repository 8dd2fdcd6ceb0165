package auth

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// ReloadOnHangup re-reads the authorization file, and the certificate
// revocation list when there is one (LoadCRL), each time the process
// receives SIGHUP, until ctx ends; a file that fails to load is logged and
// its previous version stays, without holding the other back. It does
// nothing for a nil Authorizer.
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
			a.reloadFiles(log)
		}
	}
}

// reloadFiles is what SIGHUP does.
func (a *Authorizer) reloadFiles(log *slog.Logger) {
	if err := a.Reload(); err != nil {
		log.Error("reload authorization file; keeping the previous one", "err", err)
	} else {
		log.Info("reloaded authorization file", "file", a.file)
		for _, w := range a.Warnings() {
			log.Warn(w)
		}
	}
	if a.crl == nil {
		return
	}
	closed, err := a.crl.Reload()
	if err != nil {
		log.Error("reload certificate revocation list; keeping the previous one", "err", err)
		return
	}
	log.Info("reloaded certificate revocation list", "file", a.crl.File(), "revoked", a.crl.Len(), "closed_connections", closed)
}
