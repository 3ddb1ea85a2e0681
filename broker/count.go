package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A Span is a range of offsets of one partition whose records
// CountRecords counts: the offsets between a consumer group's committed
// offset and the last stable offset are not all records, since each
// transaction that wrote to the partition left a marker, and an aborted
// one left records no read_committed reader sees.
type Span struct {
	Topic     string
	Partition int32
	// From and End bound the span: [From, End).
	From, End int64
	// Skip, if not nil, says which records not to count (a record the
	// reader knows is done, say).
	Skip func(*kgo.Record) bool

	to      int64 // reading stops here: End, or less to sample
	next    int64 // offset after the last one read
	bytes   int
	records int64
	done    bool
}

// Counted returns the span's count of records and whether it is exact:
// read to its end, or scaled from what was read.
func (s *Span) Counted() (int64, bool) {
	if s.End <= s.From {
		return 0, true
	}
	if s.done && s.next >= s.End {
		return s.records, true
	}
	read := s.next - s.From
	if read <= 0 {
		return s.End - s.From, false // nothing read: the offsets are all there is
	}
	return int64(float64(s.records)*float64(s.End-s.From)/float64(read) + 0.5), false
}

// CountRecords reads the spans as a read_committed consumer that keeps
// the transaction markers (so that a span ending in one is seen to end),
// counting the records that are neither markers nor skipped. It reads at
// most maxOffsets offsets and maxBytes bytes of each span, and for at most
// timeout: a span not read to its end is estimated from what was read
// (Span.Counted).
func CountRecords(ctx context.Context, conn Conn, spans []*Span, maxOffsets int64, maxBytes int, timeout time.Duration) error {
	// Spans of one partition (of several groups, say) share its read,
	// from the lowest of their offsets.
	offsets := map[string]map[int32]kgo.Offset{}
	open := map[string]map[int32][]*Span{}
	from := map[string]map[int32]int64{}
	left := 0
	for _, sp := range spans {
		if sp.End <= sp.From {
			continue
		}
		sp.next, sp.to = sp.From, min(sp.End, sp.From+maxOffsets)
		if offsets[sp.Topic] == nil {
			offsets[sp.Topic], open[sp.Topic], from[sp.Topic] = map[int32]kgo.Offset{}, map[int32][]*Span{}, map[int32]int64{}
		}
		if f, ok := from[sp.Topic][sp.Partition]; !ok || sp.From < f {
			from[sp.Topic][sp.Partition] = sp.From
			offsets[sp.Topic][sp.Partition] = kgo.NewOffset().At(sp.From)
		}
		open[sp.Topic][sp.Partition] = append(open[sp.Topic][sp.Partition], sp)
		left++
	}
	if left == 0 {
		return nil
	}
	cl, err := conn.NewClient(
		kgo.ConsumePartitions(offsets),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.FetchMaxPartitionBytes(1<<20),
	)
	if err != nil {
		return fmt.Errorf("broker: counting records: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil // the spans not read to their end are estimated
		}
		fs.EachRecord(func(r *kgo.Record) {
			for _, sp := range open[r.Topic][r.Partition] {
				if sp.done || r.Offset < sp.next {
					continue
				}
				sp.next = r.Offset + 1
				if !r.Attrs.IsControl() {
					sp.bytes += len(r.Key) + len(r.Value)
					if sp.Skip == nil || !sp.Skip(r) {
						sp.records++
					}
				}
				if sp.next >= sp.to || sp.bytes >= maxBytes {
					sp.done = true
					left--
				}
			}
		})
	}
	return nil
}
