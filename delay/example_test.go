package delay_test

import (
	"fmt"
	"time"

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
