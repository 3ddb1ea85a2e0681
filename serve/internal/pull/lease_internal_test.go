package pull

import (
	"encoding/json"
	"testing"
	"time"
)

// TestLeaseFold: the order of the lease topic decides every race: the
// first take holds the task, a second take while it is held does not
// count, an acknowledgment and an expiry of one lease exclude each other,
// an acknowledgment of an expired lease counts unless the task was taken
// again, and one naming another lease never counts.
func TestLeaseFold(t *testing.T) {
	at := time.Unix(1000, 0)
	take := func(n string) leaseEvent { return takeOf(n, 7) }
	steps := []struct {
		ev     leaseEvent
		counts bool
		want   string // taken, expired, acked, free
	}{
		{leaseEvent{Kind: evAck, Nonce: "a0"}, false, "free"}, // never handed out
		{leaseEvent{Kind: evExpire, Nonce: "e0", Lease: "L1"}, false, "free"},
		{take("L1"), true, "taken"},
		{take("L2"), false, "taken"},                                        // held by L1
		{leaseEvent{Kind: evAck, Nonce: "a1", Lease: "L2"}, false, "taken"}, // names another lease
		{leaseEvent{Kind: evExpire, Nonce: "e1", Lease: "L2"}, false, "taken"},
		{leaseEvent{Kind: evExpire, Nonce: "e2", Lease: "L1"}, true, "expired"},
		{leaseEvent{Kind: evExpire, Nonce: "e3", Lease: "L1"}, false, "expired"},
		{take("L2b"), false, "expired"},                                     // the run whose lease expired spent its try
		{takeOf("L3", 9), true, "taken"},                                    // its retry is handed out
		{leaseEvent{Kind: evAck, Nonce: "a2", Lease: "L1"}, false, "taken"}, // the ended lease's ACK
		{leaseEvent{Kind: evExpire, Nonce: "e4", Lease: "L3"}, true, "expired"},
		{leaseEvent{Kind: evAck, Nonce: "a3", Result: []byte("r")}, true, "acked"}, // late, not taken again
		{leaseEvent{Kind: evAck, Nonce: "a4", Result: []byte("s")}, false, "acked"},
		{take("L4"), false, "acked"},
	}
	var st leaseState
	for i, s := range steps {
		got := st.apply(s.ev, at)
		if got != s.counts || stateName(st) != s.want {
			t.Fatalf("step %d (%s %s): counted %v, state %s; want %v, %s", i, s.ev.Kind, s.ev.Nonce, got, stateName(st), s.counts, s.want)
		}
		if got != st.counted(s.ev.Kind, s.ev.Nonce) && s.ev.Kind != evTake {
			t.Fatalf("step %d: counted says %v", i, !got)
		}
	}
	if string(st.Result) != "r" || st.Lease != "L3" {
		t.Fatalf("final state %+v: want the first ACK's result, lease L3", st)
	}
}

// takeOf is a take with nonce n of the run at offset o.
func takeOf(n string, o int64) leaseEvent {
	return leaseEvent{Kind: evTake, Nonce: n, Partition: 0, Offset: o, Until: 2000, TTR: 1000}
}

func stateName(st leaseState) string {
	switch {
	case st.Taken:
		return "taken"
	case st.Expired:
		return "expired"
	case st.Acked:
		return "acked"
	}
	return "free"
}

// FuzzLeaseEvent: any bytes in the lease topic decode to an event or an
// error, never a panic; what decodes folds without a panic, and encodes
// back to an event that decodes the same.
func FuzzLeaseEvent(f *testing.F) {
	f.Add([]byte(`{"kind":"take","nonce":"N","partition":1,"offset":2,"until":3,"ttr_ms":4}`))
	f.Add([]byte(`{"kind":"ack","nonce":"N","result":"cg=="}`))
	f.Add([]byte(`{"kind":"expire","nonce":"N","lease":"L"}`))
	f.Add([]byte(`{"kind":"take","nonce":"","until":-1}`))
	f.Add([]byte(`{"kind":"grant","nonce":"N","holder":"h","runner":"r","until":3,"task":{"value":"dg=="}}`))
	f.Add([]byte(`{"kind":"probe","nonce":"N","holder":"h","key":"K"}`))
	f.Add([]byte(`{"kind":"pong","nonce":"N","holder":"h","lease":"P","held":true}`))
	f.Add([]byte(`{"kind":"cancel","nonce":"N"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := decodeLeaseEvent(b)
		if err != nil {
			return
		}
		var st leaseState
		st.apply(ev, time.Now())
		again, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		ev2, err := decodeLeaseEvent(again)
		if err != nil {
			t.Fatalf("%s decoded, but its encoding %s does not: %v", b, again, err)
		}
		if ev2.Kind != ev.Kind || ev2.Nonce != ev.Nonce || ev2.Lease != ev.Lease || ev2.Until != ev.Until || ev2.Runner != ev.Runner || ev2.Key != ev.Key || ev2.Held != ev.Held || string(ev2.Result) != string(ev.Result) {
			t.Fatalf("%+v encoded and decoded is %+v", ev, ev2)
		}
	})
}

// TestUnwantedKeepsLaterWants: a revoked grant forgets the want it was
// made on, not one its holder wrote after the grant (a consumer that came
// later and waits still).
func TestUnwantedKeepsLaterWants(t *testing.T) {
	lg := &ledger{id: "self", wants: map[string]map[string]want{}, wanted: map[string]chan struct{}{}}
	now := time.Now()
	wantOf := func(holder string, at time.Time) {
		lg.wantLocked(leaseEvent{Kind: evWant, Queue: "q", Holder: holder, Until: at.Add(time.Minute).UnixMilli()}, at)
	}
	wantOf("b", now)
	granted := now.Add(time.Second)
	if h, ok, _ := lg.wantedElsewhere("q"); !ok || h != "b" {
		t.Fatalf("wanted by %q, %v; want b", h, ok)
	}
	wantOf("b", granted.Add(time.Second)) // a consumer came after the grant
	lg.unwanted("q", "b", granted)
	if h, ok, _ := lg.wantedElsewhere("q"); !ok || h != "b" {
		t.Fatalf("the later want was forgotten: %q, %v", h, ok)
	}
	lg.unwanted("q", "b", granted.Add(2*time.Second)) // a grant made after it found no one
	if h, ok, _ := lg.wantedElsewhere("q"); ok {
		t.Fatalf("a want a grant found no consumer for is kept: %q", h)
	}
	wantOf("self", now) // this server's own wants are not others'
	if h, ok, _ := lg.wantedElsewhere("q"); ok {
		t.Fatalf("wanted by %q: its own want", h)
	}
}

// TestLeaseCancel: a DELETE's cancel counts while the task is not handed
// out, and then neither a take, a grant nor an acknowledgment does; after
// a take it does not count (the DELETE is the take's ACK then).
func TestLeaseCancel(t *testing.T) {
	at := time.Unix(1000, 0)
	var st leaseState
	steps := []struct {
		ev     leaseEvent
		counts bool
	}{
		{leaseEvent{Kind: evCancel, Nonce: "c1"}, true},
		{leaseEvent{Kind: evCancel, Nonce: "c2"}, false},
		{takeOf("L1", 7), false},
		{leaseEvent{Kind: evGrant, Nonce: "G1", Holder: "b", Runner: "a", Until: 3000, Task: &wireTask{}}, false},
		{leaseEvent{Kind: evAck, Nonce: "a1"}, false},
	}
	for i, s := range steps {
		if got := st.apply(s.ev, at); got != s.counts || got != st.counted(s.ev.Kind, s.ev.Nonce) && s.ev.Kind != evTake {
			t.Fatalf("step %d (%s %s): counted %v; want %v", i, s.ev.Kind, s.ev.Nonce, got, s.counts)
		}
	}
	if !st.Canceled || st.Taken || st.Granted || st.Acked {
		t.Fatalf("state %+v: want canceled alone", st)
	}
	var taken leaseState
	taken.apply(takeOf("L1", 7), at)
	if taken.apply(leaseEvent{Kind: evCancel, Nonce: "c3"}, at) || taken.Canceled {
		t.Fatalf("a cancel after a take counted: %+v", taken)
	}
}
