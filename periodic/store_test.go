package periodic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/table"
	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/producer"
)

// TestStore: schedules added through one store are listed, with their
// next ticks, by it and by another store opened later; adding a schedule
// again keeps its Since unless its timing changed; a cursor counts for its
// schedule's generation only; removing deletes; bad input writes nothing.
func TestStore(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "reports", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := Open(ctx, conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	for _, bad := range []Schedule{
		{Name: "a b", Queue: "reports", Every: time.Minute},
		{Name: "x", Queue: "reports", Every: 1500 * time.Millisecond},
		{Name: "x", Queue: "reports", Cron: "0 9 * * *", TZ: "Nowhere/Else"},
		{Name: "x", Queue: "reports"},
	} {
		if _, err := s.Add(ctx, bad); !errors.Is(err, ErrInvalid) || len(err.Error()) < 20 {
			t.Errorf("Add(%+v) = %v; want ErrInvalid, explained", bad, err)
		}
	}
	if _, err := s.Add(ctx, Schedule{Name: "x", Queue: "missing", Every: time.Minute}); !errors.Is(err, producer.ErrQueueNotFound) {
		t.Errorf("Add to a missing queue: %v; want ErrQueueNotFound", err)
	}
	// A lane queue needs its lane: the command to make it names the lane.
	if _, err := s.Add(ctx, Schedule{Name: "x", Queue: "nolane/x", Every: time.Minute}); !errors.Is(err, producer.ErrQueueNotFound) ||
		!strings.Contains(err.Error(), "onceq topics create nolane") {
		t.Errorf("Add to a lane queue of a missing lane: %v; want ErrQueueNotFound naming the lane", err)
	}
	for _, bad := range []string{"reports/", "reports/a b", "reports/" + strings.Repeat("x", onceq.MaxLabelLen+1)} {
		if _, err := s.Add(ctx, Schedule{Name: "x", Queue: bad, Every: time.Hour}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Add to queue %q: %v; want ErrInvalid", bad, err)
		}
	}
	if recs := testutil.ReadCommitted(t, conn, 10*time.Second, Topic); len(recs) != 0 {
		t.Fatalf("refused schedules wrote %d records", len(recs))
	}

	before := time.Now().Truncate(time.Millisecond)
	hourly, err := s.Add(ctx, Schedule{Name: "hourly", Queue: "reports", Every: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if hourly.Since.Before(before) || hourly.Since.After(time.Now()) {
		t.Fatalf("Since %v; want the time of Add, after %v", hourly.Since, before)
	}
	payday, err := s.Add(ctx, Schedule{Name: "payday", Queue: "reports", Cron: "0 9 1 * *", TZ: "Europe/Paris", Payload: []byte{0xff, 'x'},
		MaxAttempts: 3, Timeout: 90 * time.Second, Missed: SkipMissed, Since: time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 10, 30, 0, 0, time.UTC)
	want := []Entry{
		{Schedule: hourly, Next: time.Date(2030, 1, 1, 11, 0, 0, 0, time.UTC)},
		{Schedule: payday, Next: time.Date(2030, 2, 1, 8, 0, 0, 0, time.UTC)},
	}
	if got := s.List(now); !equalEntries(got, want) {
		t.Fatalf("List = %+v\nwant %+v", got, want)
	}
	other, err := Open(ctx, conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if got := other.List(now); !equalEntries(got, want) {
		t.Fatalf("another store's List = %+v\nwant %+v", got, want)
	}
	b, err := json.Marshal(want[1])
	if err != nil || string(b) != `{"name":"payday","queue":"reports","cron":"0 9 1 * *","tz":"Europe/Paris","payload_base64":"/3g=","max_attempts":3,`+
		`"timeout":"1m30s","missed":"skip","since":"2029-01-01T00:00:00Z","next":"2030-02-01T08:00:00Z"}` {
		t.Fatalf("JSON of an entry: %s %v", b, err)
	}

	// The same timing again keeps Since; another timing starts anew.
	again, err := s.Add(ctx, Schedule{Name: "hourly", Queue: "reports", Every: time.Hour, Payload: []byte("v2")})
	if err != nil || !again.Since.Equal(hourly.Since) {
		t.Fatalf("adding hourly again: Since %v (%v); want the first's, %v", again.Since, err, hourly.Since)
	}
	c, _ := compile(again)
	s.writeCursor(c, now)
	waitFor(t, "the cursor in another store", func() bool {
		e, _ := other.Get("hourly", now)
		return e.Last.Equal(now) && string(e.Payload) == "v2"
	})
	halfHourly, err := s.Add(ctx, Schedule{Name: "hourly", Queue: "reports", Every: 30 * time.Minute})
	if err != nil || !halfHourly.Since.After(hourly.Since) {
		t.Fatalf("hourly with another interval: Since %v (%v); want after %v", halfHourly.Since, err, hourly.Since)
	}
	if e, _ := s.Get("hourly", now); !e.Last.IsZero() {
		t.Fatalf("the old timing's cursor counts for the new one: Last %v", e.Last)
	}
	if r := s.snapshot()["hourly"]; !r.after.Equal(halfHourly.Since) {
		t.Fatalf("a scheduler resumes hourly after %v; want its new Since %v", r.after, halfHourly.Since)
	}

	if err := other.Remove(ctx, "hourly"); err != nil {
		t.Fatal(err)
	}
	if l := other.List(now); len(l) != 1 || l[0].Name != "payday" {
		t.Fatalf("List after Remove: %+v", l)
	}
	waitFor(t, "the removal in the first store", func() bool { _, ok := s.Get("hourly", now); return !ok })
	if err := s.Remove(ctx, "hourly"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("removing a removed schedule: %v", err)
	}
	// A schedule may tick into a lane queue of an existing lane.
	if sch, err := s.Add(ctx, Schedule{Name: "nightly", Queue: "reports/cleanup", Every: time.Hour}); err != nil || sch.Queue != "reports/cleanup" {
		t.Fatalf("Add to a lane queue: %+v, %v", sch, err)
	}
}

// TestSyncSeesAnotherStoresWrite: after Sync, a store's Get sees every
// schedule another store added or removed before it, with no wait (what
// the server's PUT decides a namespace's claim on a name by); Sync on a
// closed store says so.
func TestSyncSeesAnotherStoresWrite(t *testing.T) {
	_, conn := testutil.StartBroker(t, "")
	testutil.CreateTopic(t, conn, "reports", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	writer, err := Open(ctx, conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	reader, err := Open(ctx, conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Sync(ctx); err != nil {
		t.Fatalf("Sync of an empty store: %v", err)
	}
	now := time.Now()
	for i := range 20 {
		name := fmt.Sprintf("s%d", i)
		if _, err := writer.Add(ctx, Schedule{Name: name, Queue: "reports", Every: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := reader.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := reader.Get(name, now); !ok {
			t.Fatalf("%s, added by another store, is not in the store after Sync", name)
		}
		if err := writer.Remove(ctx, name); err != nil {
			t.Fatal(err)
		}
		if err := reader.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := reader.Get(name, now); ok {
			t.Fatalf("%s, removed by another store, is still in the store after Sync", name)
		}
	}
	reader.Close()
	if err := reader.Sync(ctx); !errors.Is(err, table.ErrClosed) {
		t.Fatalf("Sync after Close: %v; want table.ErrClosed", err)
	}
}

func equalEntries(a, b []Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !bytes.Equal(x.Payload, y.Payload) {
			return false
		}
		x.Payload, y.Payload = nil, nil
		if !x.Since.Equal(y.Since) || !x.Last.Equal(y.Last) || !x.Next.Equal(y.Next) {
			return false
		}
		x.Since, y.Since, x.Last, y.Last, x.Next, y.Next = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30s", what)
		}
	}
}

// FuzzDecode: decode never panics on a record of the topic; a schedule it
// accepts validates and survives a round trip through encodeSchedule, a
// cursor through encodeCursor.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("nightly"), []byte(`{"v":1,"queue":"q","cron":"0 2 * * *","tz":"Europe/Paris","payload":"aGk=","missed":"skip","since":1700000000000}`))
	f.Add([]byte("beat"), []byte(`{"v":1,"queue":"q","every_ms":1000,"max_attempts":3,"timeout_ms":500,"missed":"catch-up","since":0}`))
	f.Add([]byte("beat@last"), []byte(`{"v":1,"tick":1700000001000,"since":1700000000000}`))
	f.Add([]byte("beat@last"), []byte(nil))
	f.Add([]byte("beat"), []byte(nil))
	f.Add([]byte("beat"), []byte(`{"v":1,"queue":"q","every_ms":1500,"missed":"catch-up","since":1}`))
	f.Add([]byte("@last"), []byte(`{}`))
	f.Fuzz(func(t *testing.T, key, val []byte) {
		d, err := decode(key, val)
		if err != nil {
			return
		}
		if ValidateName(d.name) != nil {
			t.Fatalf("accepted the name %q", d.name)
		}
		switch {
		case val == nil:
		case d.cursor:
			back, err := decode(key, encodeCursor(d.cur))
			if err != nil || !back.cur.tick.Equal(d.cur.tick) || !back.cur.since.Equal(d.cur.since) {
				t.Fatalf("cursor %+v came back as %+v, %v", d.cur, back.cur, err)
			}
		default:
			if err := d.sched.Validate(); err != nil {
				t.Fatalf("accepted an invalid schedule: %v", err)
			}
			back, err := decode(key, encodeSchedule(d.sched.Schedule))
			if err != nil || !equalEntries([]Entry{{Schedule: back.sched.Schedule}}, []Entry{{Schedule: d.sched.Schedule}}) {
				t.Fatalf("schedule %+v came back as %+v, %v", d.sched.Schedule, back, err)
			}
		}
	})
}
