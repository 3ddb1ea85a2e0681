package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Leases. A task handed out to an HTTP consumer is leased until its
// time-to-run ends, and the lease lives in Kafka, not in the server that
// handed the task out: every server of a pull group appends its takes,
// acknowledgments and expiries to the group's lease topic
// (leaseTopic), keyed by queue and task ID, and every server reads the
// topic and folds it into the same states (leaseState.apply). The topic's
// order decides every race: of two takes of one task the first holds it,
// of an acknowledgment and an expiry of one lease the first wins, and a
// writer learns whether its event counted by reading the topic up to it.
//
// So an acknowledgment sent to any server, before or after a restart of
// the one that handed the task out, reaches the worker running the task
// (on whichever server owns its partition by then), which commits it with
// the acknowledged result; a worker that runs a task again after a restart
// or a rebalance finds its lease and waits for it instead of handing the
// task out a second time.

// Kinds of lease events.
const (
	evTake   = "take"   // a consumer took the task until Until
	evAck    = "ack"    // a consumer acknowledged it with Result
	evExpire = "expire" // the time-to-run of lease Lease passed first
)

// leaseEvent is one record of the lease topic. A record with no value (a
// tombstone) forgets the task's lease: its acknowledgment committed.
type leaseEvent struct {
	Kind string `json:"kind"`
	// Nonce is the writer's: it tells whether its event counted. A take's
	// nonce names the lease it opens.
	Nonce string `json:"nonce"`
	// Lease is the lease an expiry ends, or the one an acknowledgment
	// names (none: whichever is open).
	Lease string `json:"lease,omitempty"`
	// Partition and Offset locate the run of the task that was taken.
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
	// Until is when a take's time-to-run ends (Unix milliseconds), TTR
	// the time-to-run and Freeze whether it spends no try (freeze_tries).
	Until  int64  `json:"until,omitempty"`
	TTR    int64  `json:"ttr_ms,omitempty"`
	Freeze bool   `json:"freeze,omitempty"`
	Result []byte `json:"result,omitempty"`
}

// maxLeaseEvent bounds a lease record: a result and its envelope.
const maxLeaseEvent = 2 << 20

// decodeLeaseEvent reads a lease record's value.
func decodeLeaseEvent(v []byte) (leaseEvent, error) {
	var ev leaseEvent
	if len(v) > maxLeaseEvent {
		return ev, fmt.Errorf("lease record of %d bytes: more than %d", len(v), maxLeaseEvent)
	}
	if err := json.Unmarshal(v, &ev); err != nil {
		return ev, fmt.Errorf("lease record: %w", err)
	}
	switch {
	case ev.Kind != evTake && ev.Kind != evAck && ev.Kind != evExpire:
		return ev, fmt.Errorf("lease record of kind %q: want take, ack or expire", ev.Kind)
	case ev.Nonce == "":
		return ev, errors.New("lease record without a nonce")
	case ev.Kind == evExpire && ev.Lease == "":
		return ev, errors.New("lease expiry without the lease it ends")
	case ev.Kind == evTake && (ev.Until <= 0 || ev.TTR <= 0 || ev.Offset < 0 || ev.Partition < 0):
		return ev, errors.New("lease take without its run and time-to-run")
	}
	return ev, nil
}

// leaseState is what the lease topic says of one task.
type leaseState struct {
	Lease     string // the last take's nonce
	Partition int32  // the run it took
	Offset    int64
	Until     time.Time
	TTR       time.Duration
	Freeze    bool
	// Taken: the lease is open. Expired: its time-to-run passed first.
	// Acked: a consumer acknowledged it, with Result.
	Taken, Expired, Acked bool
	Result                []byte
	// AckNonce and ExpireNonce are the nonces of the events that counted.
	AckNonce, ExpireNonce string
	// touched is when an event last counted: states no event touches for
	// leaseKeep are forgotten.
	touched time.Time
}

// apply folds ev into st and reports whether it counted: a take counts
// unless the task is taken or acknowledged, an acknowledgment if the task
// was taken (its lease open or expired, and the one it names if it names
// one) and not acknowledged yet, an expiry if the lease it ends is open.
func (st *leaseState) apply(ev leaseEvent, at time.Time) bool {
	switch ev.Kind {
	case evTake:
		if st.Taken || st.Acked {
			return false
		}
		*st = leaseState{Lease: ev.Nonce, Partition: ev.Partition, Offset: ev.Offset, Until: time.UnixMilli(ev.Until),
			TTR: time.Duration(ev.TTR) * time.Millisecond, Freeze: ev.Freeze, Taken: true}
	case evAck:
		if st.Acked || !(st.Taken || st.Expired) || (ev.Lease != "" && ev.Lease != st.Lease) {
			return false
		}
		st.Taken, st.Expired, st.Acked, st.Result, st.AckNonce = false, false, true, ev.Result, ev.Nonce
	case evExpire:
		if !st.Taken || ev.Lease != st.Lease {
			return false
		}
		st.Taken, st.Expired, st.ExpireNonce = false, true, ev.Nonce
	default:
		return false
	}
	st.touched = at
	return true
}

// counted reports whether the event with nonce n counted in st.
func (st *leaseState) counted(kind, n string) bool {
	switch kind {
	case evTake:
		return st.Lease == n
	case evAck:
		return st.Acked && st.AckNonce == n
	case evExpire:
		return st.ExpireNonce == n
	}
	return false
}

// validLease reports whether s can be a lease a consume answered with
// (rand.Text's alphabet), or is empty: none named.
func validLease(s string) bool {
	if len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !('A' <= c && c <= 'Z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}
