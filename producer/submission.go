package producer

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// submission is one task on its way to the brokers, in one allocation:
// its record, what its acknowledgment needs, and room for the headers and
// header values of a plain task (its ID, whether it was generated and its
// enqueue time, for IDs of up to 43 bytes; a larger task takes more, and
// so does a lane queue's, whose key holds its queue and its ID).
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
// class of Go's allocator, which is why the sample time and the index are
// 32 bits; a task's pending record (records.go) takes it to 416.
type submission struct {
	rec  kgo.Record
	fn   func(Receipt, error)      // SubmitAsync's callback, or
	many func(int, Receipt, error) // SubmitMany's, called with index
	id   string
	q    *topicState // the task's queue; the record's topic is a bucket's when the task is delayed
	// sent is the submission time of a task in the latency sample, in
	// microseconds since the producer's epoch modulo 2^32: the difference
	// is right for any acknowledgment within 71 minutes. 0: not sampled.
	sent    uint32
	index   uint32 // in SubmitMany's tasks
	headers [3]kgo.RecordHeader
	values  [56]byte
	// A recorded task's (records.go): its batch of pending records, the
	// acknowledgments still to come (its task's and its record's), and
	// the task's error, kept for the last of them.
	pend *recordBatch
	left atomic.Int32
	err  error
}

var _ context.Context = (*submission)(nil)

// Deadline, Done, Err and Value make a submission a context that is never
// canceled and carries no values, as context.Background.
func (*submission) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*submission) Done() <-chan struct{}       { return nil }
func (*submission) Err() error                  { return nil }
func (*submission) Value(any) any               { return nil }

// micros is the time since the producer's epoch in microseconds, modulo
// 2^32, as submission.sent counts it.
func (p *Producer) micros() uint32 { return uint32(time.Since(p.epoch) / time.Microsecond) }

// sample puts every latencySample-th task submitted to a queue with
// SubmitAsync in the latency sample.
func (p *Producer) sample(s *submission) {
	if s.q.submissions.Add(1)%latencySample == 1 {
		s.sent = max(p.micros(), 1)
	}
}

// sampleMany puts the first task of a SubmitMany call and every
// latencySample-th after it in the latency sample. It counts nothing
// shared: an atomic counter per task, on a cache line the acknowledgments
// read on another core, cost more than the rest of the sampling.
func (p *Producer) sampleMany(s *submission, i int) {
	if i%latencySample == 0 {
		s.sent = max(p.micros(), 1)
	}
}

// promised is the promise of the records SubmitAsync and SubmitMany
// produce.
func (p *Producer) promised(r *kgo.Record, err error) {
	s := r.Context.(*submission)
	s.err = err
	if s.pend != nil && s.left.Add(-1) != 0 {
		return // its record's acknowledgment settles it
	}
	p.settled(s)
}

// acked settles a submission: it frees its admission slot, counts it and
// returns what its callback gets. Acknowledgments come one at a time, on
// franz-go's promise goroutine.
func (p *Producer) acked(s *submission, err error) (Receipt, error) {
	p.slots.release(1)
	r := &s.rec
	rc := Receipt{ID: s.id, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Delayed: r.Topic != s.q.name}
	if err != nil {
		p.noteError(r.Topic, err)
		rc.Partition, rc.Offset = 0, 0
		err = p.wrap(&rc, err)
		p.m.fail(s.q.name, err)
		return rc, err
	}
	s.q.submitted.Inc()
	if s.sent != 0 {
		s.q.duration.Observe(float64(p.micros()-s.sent) / 1e6)
	}
	if s.pend != nil && s.pend.err != nil {
		return rc, p.wrap(&rc, fmt.Errorf("%w: %w", errNotRecorded, s.pend.err))
	}
	return rc, nil
}
