package producer

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// submission is one task on its way to the brokers, in one allocation:
// its record, what its acknowledgment needs, and room for the headers and
// header values of a plain task (its ID, whether it was generated and its
// enqueue time, for IDs of up to 43 bytes; a larger task takes more).
// Before, the record, its values and the closure franz-go calls back were
// three allocations per task, and allocating was the largest cost
// SubmitAsync added to franz-go's own.
//
// The submission is also its record's Context: franz-go hands the record
// back to the producer's one promise, which finds its submission there. As
// a context it is never canceled, which is what a buffered task needs: its
// caller's context must not fail the other tasks batched with it.
//
// The fields the acknowledgment reads come right after the record, whose
// last fields franz-go has just written: by the time a task is
// acknowledged, the rest of its submission has long left the CPU's caches
// (a producer holds up to MaxBufferedRecords of them), and a cache miss per
// field was a tenth of an acknowledgment's cost. 384 bytes in all, a size
// class of Go's allocator.
type submission struct {
	rec     kgo.Record
	fn      func(Receipt, error)
	id      string
	dest, q *topicState   // the topic written, and the task's queue
	sent    time.Duration // for the latency sample: since the producer's epoch; 0 when not sampled
	headers [3]kgo.RecordHeader
	values  [56]byte
}

var _ context.Context = (*submission)(nil)

// Deadline, Done, Err and Value make a submission a context that is never
// canceled and carries no values, as context.Background.
func (*submission) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*submission) Done() <-chan struct{}       { return nil }
func (*submission) Err() error                  { return nil }
func (*submission) Value(any) any               { return nil }

// promised is the promise of the records SubmitAsync produces.
func (p *Producer) promised(r *kgo.Record, err error) {
	p.acked(r.Context.(*submission), err)
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
	if s.sent != 0 {
		s.q.duration.Observe((time.Since(p.epoch) - s.sent).Seconds())
	}
	s.fn(rc, nil)
}
