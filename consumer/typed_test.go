package consumer_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/consumer"
)

type email struct {
	To    string `json:"to"`
	Count int    `json:"count"`
}

func TestJSONDecodesOnce(t *testing.T) {
	var got email
	calls := 0
	h := consumer.JSON(func(ctx context.Context, t *consumer.Task, e email) error {
		calls++
		got = e
		return nil
	})
	if err := h.Handle(context.Background(), kitTask("1", "emails", `{"to":"a@b","count":2,"extra":true}`)); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || got != (email{To: "a@b", Count: 2}) {
		t.Fatalf("calls %d, got %+v", calls, got)
	}
}

func TestJSONBadPayloadSkipsRetry(t *testing.T) {
	h := consumer.JSON(func(ctx context.Context, t *consumer.Task, e email) error {
		t.State().Set([]byte("ran"), nil)
		return nil
	})
	for _, payload := range []string{"", "not json", `{"count":"two"}`, `[1]`} {
		tk := kitTask("task-9", "emails", payload)
		err := h.Handle(context.Background(), tk)
		if !consumer.IsSkipRetry(err) || !strings.Contains(err.Error(), `"task-9"`) {
			t.Fatalf("payload %q: got %v", payload, err)
		}
		if _, ok, _ := tk.State().Get([]byte("ran")); ok {
			t.Fatalf("payload %q: handler ran", payload)
		}
	}
}

func TestJSONPassesHandlerError(t *testing.T) {
	want := errors.New("down")
	h := consumer.JSON(func(ctx context.Context, t *consumer.Task, e *email) error { return want })
	if err := h.Handle(context.Background(), kitTask("1", "q", `{"to":"x"}`)); !errors.Is(err, want) || consumer.IsSkipRetry(err) {
		t.Fatalf("got %v", err)
	}
}
