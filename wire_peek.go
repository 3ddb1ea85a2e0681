package onceq

import "github.com/twmb/franz-go/pkg/kgo"

// The peeks read one header of a record by FromRecord's rules, without
// decoding the rest: what the engines need of a record before it runs
// (its queue, its priority, its due time), read in this one place. Each
// agrees with FromRecord on every record FromRecord accepts (FuzzPeeks);
// on a record it refuses, a peek reports its header as absent or
// malformed, and the task is refused when it runs.

// peekHeader returns the value of the record's header key: found false
// without one, an error if it appears more than once.
func peekHeader(r *kgo.Record, key string) (v []byte, found bool, err error) {
	for _, h := range r.Headers {
		if h.Key != key {
			continue
		}
		if found {
			return nil, false, invalid(ErrMalformedHeader, "header "+key, string(h.Value), "the header appears more than once")
		}
		v, found = h.Value, true
	}
	return v, found, nil
}

// PeekQueue returns the queue a record's onceq-queue header names (a
// topic's name, or a lane queue's): found false when it has none (the
// task is then its topic's), an error when the header appears twice or
// names no valid queue.
func PeekQueue(r *kgo.Record) (queue string, found bool, err error) {
	v, found, err := peekHeader(r, HeaderQueue)
	if err != nil || !found {
		return "", false, err
	}
	queue = string(v)
	if err := checkQueueHeader(queue); err != nil {
		return "", false, err
	}
	return queue, true, nil
}

// checkQueueHeader checks an onceq-queue header's value: a topic's name,
// or a lane queue's (lane/label).
func checkQueueHeader(s string) error {
	if ValidateTopic(s) != nil && ValidateLaneQueue(s) != nil {
		return invalid(ErrMalformedHeader, "header "+HeaderQueue, s, "not a valid queue name")
	}
	return nil
}

// PeekPriority returns a record's priority, 0 to MaxPriority: 0 without
// an onceq-priority header, or with one FromRecord refuses.
func PeekPriority(r *kgo.Record) int {
	v, found, err := peekHeader(r, HeaderPriority)
	if err != nil || !found {
		return 0
	}
	n, err := parseUint(HeaderPriority, v, MaxPriority)
	if err != nil {
		return 0
	}
	return int(n)
}

// PeekDue returns a record's due time in unix milliseconds: found false
// without an onceq-due header, an error when it appears twice or is not
// a time the wire format takes.
func PeekDue(r *kgo.Record) (millis int64, found bool, err error) {
	v, found, err := peekHeader(r, HeaderDue)
	if err != nil || !found {
		return 0, false, err
	}
	n, err := parseUint(HeaderDue, v, MaxUnixMilli)
	if err != nil {
		return 0, false, err
	}
	return n, true, nil
}
