// Command pgtask-bench measures pgtask on a PostgreSQL server and prints a
// table: enqueue and drain throughput, wake-up latency, claim cost against
// backlog and worker memory, each beside a floor of plain single-row UPDATE
// transactions. Run `pgtask-bench -h` for its flags.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/pgtask/pgtask/tools/cmd/pgtask-bench/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
