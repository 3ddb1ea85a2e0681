package broker

import (
	"context"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Txn is what one transaction of a GroupTransactSession did.
type Txn struct {
	// Committed reports that the transaction committed; false with a nil
	// error from RunTxn means it aborted (a rebalance, a failed write).
	Committed bool
	// Failed holds the records the brokers refused, each with its error,
	// in the order the refusals arrived. Any refusal aborts the
	// transaction.
	Failed []FailedRecord
}

// FailedRecord is a record a transaction could not write.
type FailedRecord struct {
	Rec *kgo.Record
	Err error
}

// RunTxn runs one transaction of sess: it begins it, produces recs,
// flushes them and ends it, committing only if every record was written.
// beforeEnd, when not nil, is called after the flush, just before the
// end. offsets, when not nil, is called with the offset commit the session
// built (fenced by the group's generation and member, KIP-447) and may
// rewrite the offsets it commits (kgo.PreTxnCommitFnContext); the session
// still aborts on a revocation. onAbort, when not nil, is called with the
// first refused write before the transaction is ended with an abort.
//
// The error is that of Begin, Flush or End, naming the step; the callers
// name what they were committing. It is the one home of this sequence for
// the worker's commit and the delay service's moves.
func RunTxn(ctx context.Context, sess *kgo.GroupTransactSession, recs []*kgo.Record, beforeEnd func(),
	offsets func(*kmsg.TxnOffsetCommitRequest) error, onAbort func(first error)) (Txn, error) {
	if err := sess.Begin(); err != nil {
		return Txn{}, fmt.Errorf("beginning a transaction: %w", err)
	}
	var (
		mu     sync.Mutex
		failed []FailedRecord
	)
	for _, r := range recs {
		sess.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed = append(failed, FailedRecord{r, err})
				mu.Unlock()
			}
		})
	}
	if err := sess.Client().Flush(ctx); err != nil {
		return Txn{}, fmt.Errorf("flushing a transaction's records: %w", err)
	}
	mu.Lock()
	t := Txn{Failed: failed}
	mu.Unlock()
	try := kgo.TransactionEndTry(len(t.Failed) == 0)
	if !try && onAbort != nil {
		onAbort(t.Failed[0].Err)
	}
	if offsets != nil {
		ctx = kgo.PreTxnCommitFnContext(ctx, offsets)
	}
	if beforeEnd != nil {
		beforeEnd()
	}
	committed, err := sess.End(ctx, try)
	if err != nil {
		return t, fmt.Errorf("ending a transaction: %w", err)
	}
	t.Committed = committed
	return t, nil
}
