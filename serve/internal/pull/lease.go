package pull

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
	evTake   = "take"   // a consumer of server Holder took the task until Until
	evAck    = "ack"    // a consumer acknowledged it with Result
	evExpire = "expire" // the time-to-run of lease Lease passed first
	// The server running the task offers it to server Holder, whose
	// consumers asked for its queue, until Until; a revoke ends the offer
	// Lease if no take came first.
	evGrant  = "grant"
	evRevoke = "revoke"
	// A server's consumers wait for a queue until Until (wantKey).
	evWant = "want"
	// A DELETE of a task not handed out cancels it: no take after it
	// counts.
	evCancel = "cancel"
	// A server asks whether server Holder is alive (probeKey), and runs
	// the task of lease key Key; Holder answers with a pong naming the
	// probe (Lease) and whether it runs the task (Held), if it is alive.
	evProbe = "probe"
	evPong  = "pong"
	// A server removed the pull group's member Holder, which answered no
	// probe (failover.go): every server's pull worker rejoins the group
	// now (rejoinKey).
	evRejoin = "rejoin"
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
	// Holder is the server a take is for, a grant to, a want from, or a
	// probe of; Queue the queue a want is of.
	Holder string `json:"holder,omitempty"`
	// Runner is the server whose handler runs a granted task: the
	// grant's writer.
	Runner string `json:"runner,omitempty"`
	// Key is the lease a probe asks about; Held says, in its answer,
	// whether the server probed runs that lease's task.
	Key   string `json:"key,omitempty"`
	Held  bool   `json:"held,omitempty"`
	Queue string `json:"queue,omitempty"`
	// Fetch marks a want of no consumer: an acknowledgment waits for its
	// task's run, which the server owning the queue must fetch.
	Fetch bool `json:"fetch,omitempty"`
	// Task is a grant's task, as its queue holds it.
	Task *wireTask `json:"task,omitempty"`
}

// wireTask is a task's record in its queue: what a server that does not
// run the task needs to hand it out.
type wireTask struct {
	Headers []wireHeader `json:"headers,omitempty"`
	Value   []byte       `json:"value"`
}

type wireHeader struct {
	Key   string `json:"k"`
	Value []byte `json:"v"`
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
	switch ev.Kind {
	case evTake, evAck, evExpire, evGrant, evRevoke, evWant, evProbe, evPong, evCancel, evRejoin:
	default:
		return ev, fmt.Errorf("lease record of kind %q: want take, ack, expire, grant, revoke, want, probe, pong, cancel or rejoin", ev.Kind)
	}
	switch {
	case ev.Nonce == "":
		return ev, errors.New("lease record without a nonce")
	case (ev.Kind == evExpire || ev.Kind == evRevoke) && ev.Lease == "":
		return ev, fmt.Errorf("lease %s without the lease it ends", ev.Kind)
	case ev.Kind == evTake && (ev.Until <= 0 || ev.TTR <= 0 || ev.Offset < 0 || ev.Partition < 0):
		return ev, errors.New("lease take without its run and time-to-run")
	case (ev.Kind == evGrant || ev.Kind == evWant) && (ev.Holder == "" || ev.Until <= 0):
		return ev, fmt.Errorf("lease %s without its server and end", ev.Kind)
	case ev.Kind == evWant && ev.Queue == "":
		return ev, errors.New("lease want without its queue")
	case (ev.Kind == evProbe || ev.Kind == evPong || ev.Kind == evRejoin) && ev.Holder == "":
		return ev, fmt.Errorf("lease %s without its server", ev.Kind)
	case ev.Kind == evPong && ev.Lease == "":
		return ev, errors.New("lease pong without the probe it answers")
	case ev.Kind == evGrant && (ev.Task == nil || ev.Offset < 0 || ev.Partition < 0):
		return ev, errors.New("lease grant without its task")
	}
	return ev, nil
}

// runRef locates a run of a task: its record in its queue.
type runRef struct {
	Partition int32
	Offset    int64
}

// leaseState is what the lease topic says of one task.
type leaseState struct {
	Lease     string // the last take's nonce
	Partition int32  // the run it took, or was granted
	Offset    int64
	Until     time.Time
	TTR       time.Duration
	Freeze    bool
	// Taken: the lease is open. Expired: its time-to-run passed first, in
	// the run Ended. Acked: a consumer acknowledged it, with Result.
	Taken, Expired, Acked bool
	Ended                 runRef
	Result                []byte
	// Granted: the task is offered to the consumers of server Holder
	// until GrantUntil, by the grant GrantNonce; Task is the task.
	Granted bool
	Holder  string
	// Runner is the server whose handler runs the task taken or granted
	// (the take's server, or the grant's writer); "" if an older server
	// wrote the grant.
	Runner     string
	GrantNonce string
	GrantUntil time.Time
	Task       *wireTask
	// Canceled: a DELETE canceled the task while it was not handed out;
	// no take counts after it.
	Canceled bool
	// AckNonce, ExpireNonce, RevokeNonce and CancelNonce are the nonces
	// of the events that counted.
	AckNonce, ExpireNonce, RevokeNonce, CancelNonce string
	// touched is when an event last counted: states no event touches for
	// leaseKeep are forgotten.
	touched time.Time
}

// apply folds ev into st and reports whether it counted: a take counts
// unless the task is taken or acknowledged, offered to another server
// than the take's, or its run is the one whose lease expired (that run
// spent its try: it ends failed, and a later run is handed out); an
// acknowledgment if the task was taken (its lease
// open or expired, and the one it names if it names one) and not
// acknowledged yet; an expiry if the lease it ends is open; a grant if
// the task is neither taken, acknowledged nor offered; a revoke if the
// grant it ends is the open one; a cancel if the task is neither taken,
// acknowledged nor canceled, and then no take or grant counts.
func (st *leaseState) apply(ev leaseEvent, at time.Time) bool {
	switch ev.Kind {
	case evTake:
		if st.Taken || st.Acked || st.Canceled || st.Granted && st.Holder != ev.Holder || st.Expired && st.Ended == (runRef{ev.Partition, ev.Offset}) {
			return false
		}
		if !st.Granted {
			st.Runner = ev.Holder // a take of the taker's own run
		}
		st.Lease, st.Partition, st.Offset, st.Until = ev.Nonce, ev.Partition, ev.Offset, time.UnixMilli(ev.Until)
		st.TTR, st.Freeze, st.Taken, st.Expired = time.Duration(ev.TTR)*time.Millisecond, ev.Freeze, true, false
		st.Granted, st.Task = false, nil
	case evAck:
		if st.Acked || !(st.Taken || st.Expired) || (ev.Lease != "" && ev.Lease != st.Lease) {
			return false
		}
		st.Taken, st.Expired, st.Acked, st.Result, st.AckNonce = false, false, true, ev.Result, ev.Nonce
		st.Granted, st.Task = false, nil
	case evExpire:
		if !st.Taken || ev.Lease != st.Lease {
			return false
		}
		st.Taken, st.Expired, st.ExpireNonce = false, true, ev.Nonce
		st.Ended = runRef{st.Partition, st.Offset}
	case evGrant:
		if st.Taken || st.Acked || st.Granted || st.Canceled {
			return false
		}
		st.Granted, st.Holder, st.GrantNonce, st.GrantUntil = true, ev.Holder, ev.Nonce, time.UnixMilli(ev.Until)
		st.Runner = ev.Runner
		st.Partition, st.Offset, st.Task = ev.Partition, ev.Offset, ev.Task
	case evRevoke:
		if !st.Granted || ev.Lease != st.GrantNonce {
			return false
		}
		st.Granted, st.Task, st.RevokeNonce = false, nil, ev.Nonce
	case evCancel:
		if st.Taken || st.Acked || st.Canceled {
			return false
		}
		st.Canceled, st.CancelNonce = true, ev.Nonce
		st.Granted, st.Task = false, nil
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
	case evGrant:
		return st.GrantNonce == n
	case evRevoke:
		return st.RevokeNonce == n
	case evCancel:
		return st.CancelNonce == n
	}
	return false
}

// ValidLease reports whether s can be a lease a consume answered with
// (rand.Text's alphabet), or is empty: none named.
func ValidLease(s string) bool {
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
