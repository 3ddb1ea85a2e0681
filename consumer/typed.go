package consumer

import (
	"context"
	"encoding/json"
	"fmt"
)

// JSON adapts a function of a typed payload to a Handler, as River's
// Worker[T] does: the payload is decoded into a T once, here, before f
// runs. A payload that does not decode fails with SkipRetry, naming the
// task and the JSON error, since it never will. Unknown fields are
// ignored, so producers may add fields before their handlers know them.
//
//	type Email struct{ To, Subject string }
//	h := consumer.JSON(func(ctx context.Context, t *consumer.Task, e Email) error {
//		return send(ctx, t.ID, e.To, e.Subject)
//	})
func JSON[T any](f func(ctx context.Context, t *Task, args T) error) Handler {
	return HandlerFunc(func(ctx context.Context, t *Task) error {
		var args T
		if err := json.Unmarshal(t.Payload, &args); err != nil {
			return SkipRetry(fmt.Errorf("consumer: task %q: payload does not decode into %T: %w", t.ID, args, err))
		}
		return f(ctx, t, args)
	})
}
