package consumertest_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/consumer/consumertest"
)

func TestKitDefaults(t *testing.T) {
	k := consumertest.NewTask(onceq.Task{Queue: "emails"}, consumertest.Offset(7))
	ct := k.Consumer()
	if ct.Topic != "emails" || ct.Partition != 0 || ct.Offset != 7 || ct.ID != "emails/0/7" {
		t.Fatalf("got topic %q partition %d offset %d id %q", ct.Topic, ct.Partition, ct.Offset, ct.ID)
	}
	ct = consumertest.NewTask(onceq.Task{ID: "a"}, consumertest.Topic("t"), consumertest.Partition(3)).Consumer()
	if ct.Topic != "t" || ct.Partition != 3 || ct.ID != "a" {
		t.Fatalf("got topic %q partition %d id %q", ct.Topic, ct.Partition, ct.ID)
	}
	if ct := consumertest.NewTask(onceq.Task{}).Consumer(); ct.Topic != consumertest.DefaultTopic || ct.ID != consumertest.DefaultTopic+"/0/0" {
		t.Fatalf("got topic %q id %q", ct.Topic, ct.ID)
	}
}

func TestKitState(t *testing.T) {
	h := consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		s := t.State()
		if v, ok, _ := s.Get([]byte("seeded")); !ok || string(v) != "1" {
			return errors.New("seeded value not seen")
		}
		s.Set([]byte("a"), []byte("x"))
		if v, ok, _ := s.Get([]byte("a")); !ok || string(v) != "x" {
			return errors.New("own write not seen")
		}
		s.Set([]byte("empty"), nil)
		if v, ok, _ := s.Get([]byte("empty")); !ok || v == nil || len(v) != 0 {
			return errors.New("Set(nil) is not stored as empty")
		}
		s.Delete([]byte("seeded"))
		if _, ok, _ := s.Get([]byte("seeded")); ok {
			return errors.New("deleted value seen")
		}
		if n, err := s.Counter([]byte("c"), 2); err != nil || n == 0 {
			return errors.New("counter")
		}
		if n, err := s.Counter([]byte("c"), 3); err != nil || n != 5 {
			return errors.New("counter not 5")
		}
		s.Set([]byte("a"), []byte("y"))
		if _, err := s.Counter([]byte("a"), 1); err == nil {
			return errors.New("counter over a non-number")
		}
		return nil
	})
	res := consumertest.Run(context.Background(), h, onceq.Task{ID: "t"}, consumertest.State([]byte("seeded"), []byte("1")))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	var got []string
	for _, w := range res.Writes {
		if w.Delete {
			got = append(got, "del "+string(w.Key))
		} else {
			got = append(got, "set "+string(w.Key)+"="+string(w.Value))
		}
	}
	// One write per key, in the order of the first, with the last value:
	// what the worker commits.
	want := "set a=y|set empty=|del seeded|set c=5"
	if strings.Join(got, "|") != want {
		t.Fatalf("writes %q, want %q", strings.Join(got, "|"), want)
	}
	if res.Outcome != onceq.StateSucceeded || res.Writes[1].Value == nil || res.Writes[2].Value != nil {
		t.Fatal("Set(nil) must record an empty value, Delete a nil one")
	}
	if len(res.State) != 3 || string(res.State["a"]) != "y" || string(res.State["c"]) != "5" || res.State["empty"] == nil {
		t.Fatalf("state %q", res.State)
	}
	if _, ok := res.State["seeded"]; ok {
		t.Fatal("deleted key in the resulting state")
	}
}

func TestKitEmit(t *testing.T) {
	h := consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		if err := t.Emit(onceq.Task{Queue: "out", Payload: []byte("1")}); err != nil {
			return err
		}
		if err := t.Emit(onceq.Task{ID: "mine", Queue: "out"}); err != nil {
			return err
		}
		if err := t.Emit(onceq.Task{Queue: "out", Payload: bytes.Repeat([]byte("x"), 9000)}); err == nil {
			return errors.New("oversized task accepted")
		}
		if err := t.Emit(onceq.Task{Queue: "a b"}); err == nil {
			return errors.New("bad queue accepted")
		}
		return t.Emit(onceq.Task{Queue: "out"})
	})
	res := consumertest.Run(context.Background(), h, onceq.Task{ID: "in"}, consumertest.MaxMessageBytes(8192))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	var ids []string
	for _, e := range res.Emitted {
		ids = append(ids, e.ID)
	}
	if got := strings.Join(ids, ","); got != "in/0,mine,in/2" {
		t.Fatalf("emitted IDs %s", got)
	}

	long := consumertest.Run(context.Background(), consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		return t.Emit(onceq.Task{Queue: "out"})
	}), onceq.Task{ID: strings.Repeat("i", onceq.MaxIDLen)})
	if long.Err == nil || len(long.Emitted) != 0 {
		t.Fatalf("derived ID over the limit: err %v, %d emitted", long.Err, len(long.Emitted))
	}
}

func TestKitDefaultSizeLimit(t *testing.T) {
	big := bytes.Repeat([]byte("x"), onceq.DefaultMaxMessageBytes)
	res := consumertest.Run(context.Background(), consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		return t.Emit(onceq.Task{Queue: "out", Payload: big})
	}), onceq.Task{ID: "in"})
	if res.Err == nil {
		t.Fatal("a payload of the default limit plus headers was accepted")
	}
}

func TestKitResultErrors(t *testing.T) {
	skip := consumertest.Run(context.Background(), consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		return consumer.SkipRetry(errors.New("bad"))
	}), onceq.Task{ID: "a"})
	if !skip.SkipRetry() {
		t.Fatal("SkipRetry not reported")
	}
	if _, ok := skip.RetryAfter(); ok {
		t.Fatal("RetryAfter reported for SkipRetry")
	}
	later := consumertest.Run(context.Background(), consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
		return consumer.RetryAfter(3*time.Second, errors.New("busy"))
	}), onceq.Task{ID: "a"})
	if d, ok := later.RetryAfter(); !ok || d != 3*time.Second || later.SkipRetry() {
		t.Fatalf("RetryAfter: %v %v", d, ok)
	}
}

// TestStateManyWrites: a task's own writes read back, overwritten and
// deleted, below and past the number where State starts indexing them.
func TestStateManyWrites(t *testing.T) {
	s := consumertest.NewTask(onceq.Task{ID: "in", Queue: "q"}, consumertest.State([]byte("k3"), []byte("seed"))).Consumer().State()
	key := func(i int) []byte { return []byte("k" + strconv.Itoa(i)) }
	for i := range 40 {
		s.Set(key(i), []byte(strconv.Itoa(i)))
		if i%3 == 0 {
			s.Set(key(i/2), []byte("again"+strconv.Itoa(i)))
		}
		if i%7 == 0 {
			s.Delete(key(i / 3))
		}
	}
	want := map[int]string{}
	for i := range 40 {
		want[i] = strconv.Itoa(i)
		if i%3 == 0 {
			want[i/2] = "again" + strconv.Itoa(i)
		}
		if i%7 == 0 {
			delete(want, i/3)
		}
	}
	for i := range 40 {
		v, ok, err := s.Get(key(i))
		w, wok := want[i]
		if err != nil || ok != wok || string(v) != w {
			t.Errorf("%s: %q %v %v, want %q %v", key(i), v, ok, err, w, wok)
		}
	}
}
