package delay_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/delay"
)

func ExamplePlanner() {
	p := delay.DefaultPlanner()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, d := range []time.Duration{0, 300 * time.Millisecond, 90 * time.Second, 365 * 24 * time.Hour} {
		due := now.Add(d)
		fmt.Printf("%v: next %v, producer writes to %v, %d hops\n", d, p.Next(now, due), p.Route(now, due), p.Hops(now, due))
	}
	// Output:
	// 0s: next queue, producer writes to queue, 0 hops
	// 300ms: next timer 300ms, producer writes to bucket 1s onceq-delay-1s, 0 hops
	// 1m30s: next bucket 30s onceq-delay-30s, producer writes to bucket 30s onceq-delay-30s, 3 hops
	// 8760h0m0s: next bucket 1d onceq-delay-1d, producer writes to bucket 1d onceq-delay-1d, 365 hops
}

// ExampleNewService runs the delay service until interrupted, as "onceq
// delay" does.
func ExampleNewService() {
	planner, err := delay.ParseLadder("1s 5s 30s 2m 10m 1h 6h 1d") // the producers' ladder
	if err != nil {
		log.Fatal(err)
	}
	svc, err := delay.NewService(
		delay.Conn(broker.Conn{Brokers: []string{"127.0.0.1:9092"}}),
		delay.WithPlanner(planner),
		delay.StateDir("./onceq-data/delay"),
		delay.Logger(slog.Default()),
	)
	if err != nil {
		log.Fatal(err) // an invalid option
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := svc.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// ExamplePlanner_DueWithin estimates what falls due soon from what waits
// in each bucket, as onceq_delay_due_within does.
func ExamplePlanner_DueWithin() {
	p := delay.DefaultPlanner()
	for _, b := range []time.Duration{5 * time.Second, time.Hour} {
		fmt.Printf("bucket %v: %.0f%% due within a minute, %.0f%% within an hour\n",
			b, 100*p.DueWithin(b, time.Minute), 100*p.DueWithin(b, time.Hour))
	}
	// Output:
	// bucket 5s: 100% due within a minute, 100% within an hour
	// bucket 1h0m0s: 0% due within a minute, 10% within an hour
}
