package consumertest_test

import (
	"context"
	"fmt"
	"strconv"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/consumer/consumertest"
)

// Example unit-tests a handler without a broker: it counts the e-mails
// sent to an address and emits a receipt.
func Example() {
	type Email struct{ To string }
	h := consumer.JSON(func(ctx context.Context, t *consumer.Task, e Email) error {
		n, err := t.State().Counter([]byte("sent/"+e.To), 1)
		if err != nil {
			return err
		}
		return t.Emit(onceq.Task{Queue: "receipts", Payload: []byte(strconv.FormatInt(n, 10))})
	})

	res := consumertest.Run(context.Background(), h,
		onceq.Task{ID: "email-1", Queue: "emails", Payload: []byte(`{"to":"you@example.com"}`)},
		consumertest.State([]byte("sent/you@example.com"), []byte("41")))
	fmt.Println(res.Outcome, res.Err)
	fmt.Println(res.Emitted[0].ID, res.Emitted[0].Queue, string(res.Emitted[0].Payload))
	fmt.Println(string(res.State["sent/you@example.com"]))

	res = consumertest.Run(context.Background(), h, onceq.Task{ID: "email-2", Queue: "emails", Payload: []byte(`not json`)})
	fmt.Println(res.Outcome, res.DeadLetter.Reason, len(res.Emitted))
	// Output:
	// succeeded <nil>
	// email-1/0 receipts 42
	// 42
	// dead failed 0
}
