package onceq_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq"
)

func TestLaneQueueNames(t *testing.T) {
	for _, c := range []struct {
		name, topic string
		lane        bool
	}{
		{"emails", "emails", false},
		{"fn/resize-image", "fn", true},
		{"shop.eu/orders_2", "shop.eu", true},
	} {
		if got := onceq.QueueTopic(c.name); got != c.topic {
			t.Errorf("QueueTopic(%q) = %q, want %q", c.name, got, c.topic)
		}
		if _, _, ok := onceq.SplitLane(c.name); ok != c.lane {
			t.Errorf("SplitLane(%q): lane %v, want %v", c.name, ok, c.lane)
		}
		if err := onceq.ValidateAnyQueue(c.name); err != nil {
			t.Errorf("ValidateAnyQueue(%q): %v", c.name, err)
		}
	}
	for _, c := range []struct{ name, says string }{
		{"emails", "a lane queue's name is <lane>/<label>"},
		{"fn/", "the label after '/' is empty"},
		{"/x", "its lane \"\""},
		{"onceq-x/y", "reserved"},
		{"fn/a/b", "one '/' separates it"},
		{"fn/a b", "its label may hold letters"},
		{"fn/" + strings.Repeat("x", onceq.MaxLabelLen+1), "at most 128"},
	} {
		err := onceq.ValidateLaneQueue(c.name)
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ValidateLaneQueue(%q) = %v, want an error saying %q", c.name, err, c.says)
			continue
		}
		if !errors.Is(err, onceq.ErrInvalidQueue) && !errors.Is(err, onceq.ErrReservedQueue) {
			t.Errorf("ValidateLaneQueue(%q) = %v: not an invalid or reserved queue name", c.name, err)
		}
	}
	if err := onceq.ValidateAnyQueue("a b"); err == nil || !strings.Contains(err.Error(), "use letters") {
		t.Errorf("ValidateAnyQueue(%q) = %v", "a b", err)
	}
}

// TestLaneKeys: a lane queue's task without a key of its own is keyed by
// its queue and its ID, so the same ID in two lane queues is two keys; a
// key given is written as given. LaneKey puts any record's key within its
// queue, and leaves one that is there already.
func TestLaneKeys(t *testing.T) {
	for _, c := range []struct {
		task onceq.Task
		want string
	}{
		{onceq.Task{ID: "j1", Queue: "fn/a"}, "fn/a/j1"},
		{onceq.Task{ID: "j1", Queue: "fn/b"}, "fn/b/j1"},
		{onceq.Task{ID: "j1", Queue: "fn/a", Key: []byte("k")}, "k"},
		{onceq.Task{ID: "j1", Queue: "fn"}, "j1"},
		{onceq.Task{ID: strings.Repeat("i", onceq.MaxIDLen), Queue: "fn/" + strings.Repeat("l", onceq.MaxLabelLen)},
			"fn/" + strings.Repeat("l", onceq.MaxLabelLen) + "/" + strings.Repeat("i", onceq.MaxIDLen)},
	} {
		if got := string(c.task.PartitionKey()); got != c.want {
			t.Errorf("%s of %s, key %q: PartitionKey %q, want %q", c.task.ID, c.task.Queue, c.task.Key, got, c.want)
		}
		r := c.task.Record(onceq.QueueTopic(c.task.Queue))
		if string(r.Key) != c.want {
			t.Errorf("%s of %s, key %q: record keyed %q, want %q", c.task.ID, c.task.Queue, c.task.Key, r.Key, c.want)
		}
		back, err := onceq.FromRecord(r)
		if err != nil || string(back.PartitionKey()) != c.want || back.ID != c.task.ID {
			t.Errorf("%s of %s decoded: %+v, %v", c.task.ID, c.task.Queue, back, err)
		}
	}
	for _, c := range []struct{ queue, key, want string }{
		{"fn/a", "fn/a/j1", "fn/a/j1"},
		{"fn/a", "j1", "fn/a/j1"},
		{"fn/a", "fn/b/j1", "fn/a/fn/b/j1"},
		{"fn/a", "fn/ab", "fn/a/fn/ab"},
		{"fn/a", "fn/a", "fn/a/fn/a"},
	} {
		if got := onceq.LaneKey(c.queue, []byte(c.key)); got != c.want {
			t.Errorf("LaneKey(%q, %q) = %q, want %q", c.queue, c.key, got, c.want)
		}
	}
}
