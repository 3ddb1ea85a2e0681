package producer_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/broker/embedded"
	"github.com/onceq/onceq/producer"
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

	p, err := producer.New(producer.Conn(conn), producer.CreateQueues(4))
	if err != nil {
		panic(err)
	}
	defer p.Close()

	// Submit returns once the broker acknowledged the task.
	rc, err := p.Submit(ctx, onceq.Task{Queue: "emails", Key: []byte("user-42"), Payload: []byte(`{"to":"ada@example.com"}`)})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s/%d@%d delayed=%v\n", rc.Topic, rc.Partition, rc.Offset, rc.Delayed)

	// A delayed task waits in a delay bucket until it is due.
	rc, _ = p.Submit(ctx, onceq.Task{Queue: "emails", Delay: 90 * time.Second})
	fmt.Println(rc.Topic, rc.Delayed)

	// Bad input is refused before anything is sent.
	_, err = p.Submit(ctx, onceq.Task{Queue: "no spaces"})
	fmt.Println(errors.Is(err, onceq.ErrInvalidQueue))

	// All or nothing: both tasks become visible together.
	err = p.Tx(ctx, func(tx *producer.Tx) error {
		if err := tx.Submit(onceq.Task{Queue: "emails", ID: "invoice-7/mail"}); err != nil {
			return err
		}
		return tx.Submit(onceq.Task{Queue: "emails", ID: "invoice-7/reminder", Delay: 24 * time.Hour})
	})
	fmt.Println(err)
	// Output:
	// emails/0@0 delayed=false
	// onceq-delay-30s true
	// true
	// <nil>
}
