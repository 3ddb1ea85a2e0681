package inspect

import (
	"context"

	"github.com/cockroachdb/pebble/v2"
)

// SweepNow runs the sweep of queue's tasks past the retention at once.
func SweepNow(ctx context.Context, in *Inspector, queue string) error {
	q, err := in.view(ctx, queue)
	if err != nil {
		return err
	}
	return in.sweep(q)
}

// AttemptKeys counts the failed attempts the view keeps of a task.
func AttemptKeys(in *Inspector, queue, id string) (int, error) {
	prefix := attemptPrefix(queue, id)
	it, err := in.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, err
	}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n, it.Close()
}
