// Command manifold-install is the node installer that the manifold DaemonSet
// runs: it installs the manifold binary and CNI config on the host and keeps
// them current (see docs/install.md).
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/manifold-cni/manifold/install"
)

// Version is set at build time with -ldflags "-X main.Version=...".
var Version = "dev"

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	opts, err := install.ParseFlags(os.Args[0], os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		log.Error("bad command line", "error", err)
		os.Exit(2)
	}
	// SIGTERM is how the kubelet stops the pod; the installer then runs its
	// optional cleanup before exiting.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log.Info("manifold-install starting", "version", Version)
	if err := install.Run(ctx, opts, log); err != nil {
		log.Error("manifold-install failed", "error", err)
		stop()
		os.Exit(1)
	}
}
