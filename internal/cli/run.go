package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// RunCommand runs a command as every nodenet binary does: until SIGINT or
// SIGTERM (its context), quietly successful when --help was asked for (the
// flag set printed it), else exiting 1 with "name: error" on stderr.
func RunCommand(name string, run func(ctx context.Context, args []string) error, args []string) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, args)
	stop()
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	os.Exit(1)
}
