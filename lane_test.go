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
