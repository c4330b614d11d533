// Command pgtask manages pgtask's schema and generates typed task code.
// Run `pgtask help` for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pgtask/pgtask/cmd/pgtask/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
