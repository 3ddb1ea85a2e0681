package dlq_test

import (
	"fmt"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/dlq"
)

// A dead letter becomes a new incarnation of its task: the same ID, known
// to workers by the dead letter's coordinates, so it runs although the ID
// was processed, and once however often it is requeued.
func ExampleIncarnation() {
	dead := onceq.Task{ID: "invoice-42", Queue: "emails", Payload: []byte("hi"), Attempt: 5,
		LastError: "max_attempts: attempt 5 of 5: smtp: 550", Failed: time.Now()}
	rec := dead.Record("onceq-dlq-emails")
	rec.Partition, rec.Offset = 2, 17
	l := dlq.Decode(rec, "emails")
	fmt.Println(l.Reason, "/", l.Error)

	again, _ := dlq.Incarnation(&l, "emails", false, time.Now())
	fmt.Println(again.DedupKey(), again.Failed.IsZero())
	fresh, _ := dlq.Incarnation(&l, "emails", true, time.Now())
	fmt.Println(fresh.DedupKey(), fresh.LastError)
	// Output:
	// max_attempts / attempt 5 of 5: smtp: 550
	// invoice-42@2/17#5 true
	// invoice-42@2/17 max_attempts: attempt 5 of 5: smtp: 550
}
