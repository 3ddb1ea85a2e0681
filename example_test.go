package onceq_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/onceq/onceq"
)

func ExampleTask_Record() {
	t := onceq.Task{ID: "invoice-42", Queue: "emails", Payload: []byte("hello")}
	t.Resolve(time.UnixMilli(1_700_000_000_000))
	r := t.Record(t.Queue)
	for _, h := range r.Headers {
		fmt.Printf("%s=%s\n", h.Key, h.Value)
	}
	back, _ := onceq.FromRecord(r)
	fmt.Println(back.ID, back.Queue, back.Attempt, string(back.Payload))
	// Output:
	// onceq-id=invoice-42
	// onceq-enqueued=1700000000000
	// invoice-42 emails 1 hello
}

func ExampleValidateQueue() {
	err := onceq.ValidateQueue("a b")
	fmt.Println(err)
	fmt.Println(errors.Is(err, onceq.ErrInvalidQueue))
	// Output:
	// onceq: queue "a b": invalid queue name: use letters, digits, '.', '_' or '-'
	// true
}
