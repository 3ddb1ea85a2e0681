package producer

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// submission is one task on its way to the brokers, in one allocation:
// its record, room for the headers and header values of a plain task (its
// ID, whether it was generated and its enqueue time, for IDs of up to 51
// bytes; a larger task takes more), and what its acknowledgment needs. Before, the record, its values and the
// closure franz-go calls back were three allocations per task, and
// allocating was the largest cost SubmitAsync added to franz-go's own.
//
// The submission is also its record's Context: franz-go hands the record
// back to the one promise, acked, which finds its submission there. As a
// context it is never canceled, which is what a buffered task needs: its
// caller's context must not fail the other tasks batched with it.
type submission struct {
	rec     kgo.Record
	headers [3]kgo.RecordHeader
	values  [64]byte

	p       *Producer
	fn      func(Receipt, error)
	id      string
	dest, q *topicState // the topic written, and the task's queue
	start   time.Time   // for the latency sample: when it was submitted; zero when not sampled
}

var _ context.Context = (*submission)(nil)

// Deadline, Done, Err and Value make a submission a context that is never
// canceled and carries no values, as context.Background.
func (*submission) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*submission) Done() <-chan struct{}       { return nil }
func (*submission) Err() error                  { return nil }
func (*submission) Value(any) any               { return nil }

// acked is the promise of every submitted record.
func acked(r *kgo.Record, err error) {
	s := r.Context.(*submission)
	s.p.acked(s, err)
}

// acked settles a submission: it frees its admission slot, counts it and
// calls its callback. Acknowledgments come one at a time, on franz-go's
// promise goroutine.
func (p *Producer) acked(s *submission, err error) {
	p.slots.release()
	r := &s.rec
	rc := Receipt{ID: s.id, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Delayed: s.dest != s.q}
	if err != nil {
		s.dest.noteError(err)
		rc.Partition, rc.Offset = 0, 0
		err = p.wrap(&rc, err)
		p.m.fail(s.q.name, err)
		s.fn(rc, err)
		return
	}
	s.q.submitted.Inc()
	if !s.start.IsZero() {
		s.q.duration.Observe(time.Since(s.start).Seconds())
	}
	s.fn(rc, nil)
}
