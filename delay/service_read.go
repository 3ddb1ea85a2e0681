package delay

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ingest reads fetched records into their partitions.
func (s *Service) ingest(ctx context.Context, fs kgo.Fetches) error {
	now := time.Now()
	var err error
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if len(fp.Records) == 0 || err != nil {
			return
		}
		p := s.view[tp{fp.Topic, fp.Partition}]
		if p == nil || !p.loaded {
			// Assigned during the poll: take the assignment over first.
			if err = s.refreshView(ctx); err != nil {
				return
			}
			p = s.view[tp{fp.Topic, fp.Partition}]
		}
		if p == nil || p.revoked.Load() {
			return
		}
		if p.stopped {
			s.stop(p, append(p.buf, fp.Records...))
			return
		}
		if rest := s.classify(p, fp.Records, now); len(rest) > 0 {
			s.stop(p, rest)
		}
	})
	return err
}

// classify reads records in offset order into held entries, skipping the
// ones the committed cursor says moved. It returns the records from the
// first one that is not to be read yet: released further off than the
// read-ahead, or over the held budget.
func (s *Service) classify(p *part, recs []*kgo.Record, now time.Time) []*kgo.Record {
	nowMS := now.UnixMilli()
	for i, r := range recs {
		if r.Offset < p.next {
			continue
		}
		rel := releaseOf(r, p.bucket, p.smallest)
		if p.committed.moved(r.Offset, func(smallest time.Duration) int64 {
			if smallest == p.smallest {
				return rel
			}
			return releaseOf(r, p.bucket, smallest)
		}) {
			p.next, p.epoch = r.Offset+1, r.LeaderEpoch
			continue
		}
		// Below the committed high mark the previous reader read every
		// record already: reading on is bounded, and needed before the
		// partition may commit (see caughtUp).
		if r.Offset >= p.committed.High {
			if ahead := time.Duration(rel-nowMS) * time.Millisecond; ahead >= p.readAhead {
				p.wake, p.budget = time.UnixMilli(rel).Add(-p.readAhead), false
				return recs[i:]
			}
			if s.held >= s.cfg.maxHeld {
				p.budget = true
				return recs[i:]
			}
		}
		p.push(r, rel)
		s.held++
		p.next, p.epoch = r.Offset+1, r.LeaderEpoch
	}
	return nil
}

// stop pauses a partition at rest[0], keeping at most maxBuf records.
func (s *Service) stop(p *part, rest []*kgo.Record) {
	if len(rest) > maxBuf {
		if p.seek < 0 {
			p.seek = rest[maxBuf].Offset
		}
		rest = rest[:maxBuf]
	}
	p.buf = rest
	if !p.stopped {
		p.stopped = true
		s.cl.PauseFetchPartitions(map[string][]int32{p.topic: {p.partition}})
	}
}

// wakeStopped reads on in the stopped partitions whose next record may be
// read now, and resumes fetching those that read all they kept.
func (s *Service) wakeStopped(now time.Time) {
	for _, p := range s.view {
		if !p.stopped || (p.budget && s.held >= s.cfg.maxHeld) || (!p.budget && now.Before(p.wake)) {
			continue
		}
		if rest := s.classify(p, p.buf, now); len(rest) > 0 {
			p.buf = rest
			continue
		}
		p.buf, p.stopped = nil, false
		if p.seek >= 0 {
			s.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{p.topic: {p.partition: {Epoch: p.epoch, Offset: p.seek}}})
			p.seek = -1
		}
		s.cl.ResumeFetchPartitions(map[string][]int32{p.topic: {p.partition}})
	}
}
