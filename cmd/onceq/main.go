// Command onceq runs tasks and stream records on Kafka exactly once: the
// embedded broker, producers, workers, the delay service, benchmarks and
// the tools to inspect them. Run "onceq --help" for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
