package consumer_test

import (
	"strconv"
	"testing"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
)

func TestKitTaskStateAndEmit(t *testing.T) {
	var log []string
	seed := map[string][]byte{"n": []byte("4")}
	tk := consumer.NewKitTask(onceq.Task{ID: "in", Queue: "q"}, consumer.KitConfig{
		Topic: "q", Partition: 2, Offset: 9,
		State:   seed,
		OnWrite: func(k, v []byte) { log = append(log, string(k)+"="+string(v)) },
	})
	if tk.Topic != "q" || tk.Partition != 2 || tk.Offset != 9 {
		t.Fatalf("located at %s/%d/%d", tk.Topic, tk.Partition, tk.Offset)
	}
	if n, err := tk.State().Counter([]byte("n"), 1); err != nil || n != 5 {
		t.Fatalf("counter %d %v", n, err)
	}
	tk.State().Delete([]byte("n"))
	if _, ok, _ := tk.State().Get([]byte("n")); ok {
		t.Fatal("deleted key seen")
	}
	if err := tk.Emit(onceq.Task{Queue: "out"}); err != nil {
		t.Fatal(err)
	}
	if em := consumer.KitEmitted(tk); len(em) != 1 || em[0].ID != "in/0" {
		t.Fatalf("emitted %+v", em)
	}
	if len(log) != 2 || log[0] != "n=5" || log[1] != "n=" {
		t.Fatalf("writes %q", log)
	}
	if len(seed) != 1 || string(seed["n"]) != "4" {
		t.Fatalf("seed changed: %q", seed)
	}
}

// TestStateManyWrites: a task's own writes read back, overwritten and
// deleted, below and past the number where State starts indexing them.
func TestStateManyWrites(t *testing.T) {
	tk := consumer.NewKitTask(onceq.Task{ID: "in", Queue: "q"}, consumer.KitConfig{Topic: "q", State: map[string][]byte{"k3": []byte("seed")}})
	s := tk.State()
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
