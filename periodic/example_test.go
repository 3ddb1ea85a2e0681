package periodic_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
	"github.com/onceq/onceq/periodic"
)

func Example() {
	// A development broker; production points Conn at Kafka or Redpanda.
	emb, err := embedded.Start(embedded.Config{})
	if err != nil {
		panic(err)
	}
	defer emb.Close()
	conn := broker.Conn{Brokers: []string{emb.Addr()}}
	ctx := context.Background()
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		panic(err)
	}
	defer adm.Close()
	if err := adm.CreateTopic(ctx, "reports", 4, nil); err != nil {
		panic(err)
	}

	store, err := periodic.Open(ctx, conn, nil)
	if err != nil {
		panic(err)
	}
	defer store.Close()
	// Weekdays at 09:00 in Paris, and every 15 minutes.
	if _, err := store.Add(ctx, periodic.Schedule{Name: "morning-report", Queue: "reports", Cron: "0 9 * * 1-5", TZ: "Europe/Paris",
		Payload: []byte(`{"kind":"sales"}`)}); err != nil {
		panic(err)
	}
	if _, err := store.Add(ctx, periodic.Schedule{Name: "sync", Queue: "reports", Every: 15 * time.Minute, Missed: periodic.SkipMissed}); err != nil {
		panic(err)
	}

	// Bad input is refused before anything is written, naming the field.
	_, err = store.Add(ctx, periodic.Schedule{Name: "fast", Queue: "reports", Every: 500 * time.Millisecond})
	fmt.Println(errors.Is(err, periodic.ErrInvalid), err)

	// The next ticks, and the IDs of their tasks.
	saturday := time.Date(2030, 3, 30, 12, 7, 0, 0, time.UTC)
	for _, e := range store.List(saturday) {
		fmt.Println(e.Name, "|", e.Timing(), "|", e.Missed, "|", periodic.TaskID(e.Name, e.Next))
	}
	// Output:
	// true periodic: Every 500ms: want a whole number of seconds from 1s to 366 days; calendar periods are cron specs such as @monthly
	// morning-report | cron 0 9 * * 1-5 Europe/Paris | catch-up | morning-report@2030-04-01T07:00:00Z
	// sync | every 15m0s | skip | sync@2030-03-30T12:15:00Z
}
