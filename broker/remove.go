package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// StaticMembers returns the instance IDs of the static members of a
// classic consumer group now (ClassicGroup's members are static): none
// for a group that has no members, or does not exist.
func (a *Admin) StaticMembers(ctx context.Context, group string) ([]string, error) {
	g, err := a.describeGroup(ctx, group)
	var ids []string
	for _, m := range g.Members {
		if m.InstanceID != nil {
			ids = append(ids, *m.InstanceID)
		}
	}
	return ids, err
}

// RemoveMember takes the static member instance out of group as if its
// session had timed out, for a member known to be dead: first it fences
// the member's transactional producer (TransactionalID), which aborts
// its open transaction, so that the partitions it wrote to are readable
// past it and its offsets are stable; then it removes the member (KIP-345),
// which starts the group's rebalance, handing its partitions to the other
// members once they rejoin. txnTimeout is the transaction timeout the
// fencing registers for the transactional ID: the member's own
// (MemberConfig.TransactionTimeout), which its next start sets again.
//
// A member that was alive after all loses its transaction (its commit
// fails as fenced) and its partitions; it rejoins and starts a new
// session, as after a lost connection.
func (a *Admin) RemoveMember(ctx context.Context, group, instance string, txnTimeout time.Duration) error {
	if err := a.fence(ctx, TransactionalID(group, instance), txnTimeout); err != nil {
		return fmt.Errorf("broker: fencing the producer of member %s of group %q: %w", instance, group, a.conn.Explain(err))
	}
	rs, err := a.adm.LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(instance).Reason("onceq: removed for not answering its peers"))
	if err == nil {
		err = rs.Error()
	}
	if errors.Is(err, kerr.UnknownMemberID) {
		return nil // gone already: its session ended, or it left
	}
	if err != nil {
		return fmt.Errorf("broker: removing member %s from group %q: %w", instance, group, a.conn.Explain(err))
	}
	return nil
}

// fence bumps the epoch of transactional ID txid (InitProducerID), as a
// new producer of it does: the transaction coordinator aborts its open
// transaction, and the producer that ran it can write no more.
func (a *Admin) fence(ctx context.Context, txid string, txnTimeout time.Duration) error {
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = &txid
	req.TransactionTimeoutMillis = int32(txnTimeout.Milliseconds())
	for {
		resp, err := req.RequestWith(ctx, a.cl)
		if err != nil {
			return err
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		// While it aborts the open transaction, the coordinator answers
		// CONCURRENT_TRANSACTIONS; the fencing is done once it answers
		// without an error.
		// kerr does not count it as retriable: only a fencing producer
		// retries it.
		if err == nil || !kerr.IsRetriable(err) && !errors.Is(err, kerr.ConcurrentTransactions) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
