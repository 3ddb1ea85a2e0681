package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadCommitted calls fn with every record of topic that a fresh
// read_committed consumer sees, from each partition's start to its last
// stable offset when ReadCommitted is called, in offset order within a
// partition (partitions interleave). Records of transactions still open are
// not waited for. An error from fn stops the read and is returned; a
// missing topic is an error wrapping ErrTopicNotFound.
func ReadCommitted(ctx context.Context, c Conn, topic string, fn func(*kgo.Record) error) error {
	info, err := describeTopic(ctx, c, topic)
	if err != nil {
		return err
	}
	from := map[int32]int64{}
	ends := map[int32]int64{} // partitions not read to their end yet
	for _, p := range info.Partitions {
		if p.Stable > p.Start {
			from[p.Partition] = p.Start
			ends[p.Partition] = p.Stable
		}
	}
	if len(from) == 0 {
		return nil
	}
	return ReadPartitions(ctx, c, topic, from, func(rec *kgo.Record) (bool, error) {
		end := ends[rec.Partition]
		if rec.Offset >= end {
			return true, nil
		}
		if !rec.Attrs.IsControl() {
			if err := fn(rec); err != nil {
				return true, err
			}
		}
		return rec.Offset >= end-1, nil
	},
		// Transaction markers are delivered so that a partition whose
		// last stable offset follows a marker is seen to be finished.
		kgo.KeepControlRecords(),
	)
}

// ReadFenced calls fn with every record of topic that a fresh
// read_committed consumer sees before a fence: a record, made by mk, that
// ReadFenced first appends to each partition (WriteFences). That is every
// record committed by then, and those of the transactions open then once
// they end, in offset order within a partition (partitions interleave);
// fn does not see the fences. Unlike ReadCommitted it reads to the end
// after a broker crash too (ReadPartitions says why). The fences of
// earlier reads are records like any other: mark them in mk to tell them
// apart. An error from fn stops the read and is returned; a missing topic
// is an error wrapping ErrTopicNotFound.
func ReadFenced(ctx context.Context, c Conn, topic string, mk func(partition int32) *kgo.Record, fn func(*kgo.Record) error) error {
	info, err := describeTopic(ctx, c, topic)
	if err != nil {
		return err
	}
	parts := make([]int32, 0, len(info.Partitions))
	from := make(map[int32]int64, len(info.Partitions))
	for _, p := range info.Partitions {
		parts = append(parts, p.Partition)
		from[p.Partition] = p.Start
	}
	fences, err := WriteFences(ctx, c, topic, parts, mk)
	if err != nil {
		return err
	}
	return ReadPartitions(ctx, c, topic, from, func(rec *kgo.Record) (bool, error) {
		if rec.Offset >= fences[rec.Partition] {
			return true, nil
		}
		return false, fn(rec)
	})
}

// describeTopic describes topic with an admin client of its own.
func describeTopic(ctx context.Context, c Conn, topic string) (TopicInfo, error) {
	adm, err := NewAdmin(c)
	if err != nil {
		return TopicInfo{}, err
	}
	defer adm.Close()
	return adm.DescribeTopic(ctx, topic)
}

// ReadPartitions reads partitions of topic with a fresh read_committed
// consumer, each from its offset in from, and calls fn with every record
// in offset order within a partition (partitions interleave) until fn
// reports that record's partition done: its later records are not passed.
// It returns nil once every partition is done, fn's first error, or an
// error when ctx ends first. A partition whose offset is out of range is
// read from its start. opts add to the consumer's options (kgo.KeepControlRecords
// passes transaction markers to fn, for example).
//
// This is the one loop that reads a partition "to its end", whatever the
// end is: the last stable offset (ReadCommitted), or a fence record whose
// offset the caller knows because it wrote it (ReadFenced, a changelog
// restore). A fence serves where the last stable offset does not: a
// broker that restarts after a crash may abort the transactions that were
// open without writing their markers, so no record at the last stable
// offset minus one ever reaches a read_committed reader.
func ReadPartitions(ctx context.Context, c Conn, topic string, from map[int32]int64, fn func(*kgo.Record) (done bool, err error), opts ...kgo.Opt) error {
	return ReadTopics(ctx, c, map[string]map[int32]int64{topic: from}, fn, opts...)
}

// ReadTopics is ReadPartitions over partitions of several topics at once,
// with one consumer: from maps each topic to its partitions' offsets.
func ReadTopics(ctx context.Context, c Conn, from map[string]map[int32]int64, fn func(*kgo.Record) (done bool, err error), opts ...kgo.Opt) error {
	type tp struct {
		topic string
		p     int32
	}
	starts := make(map[string]map[int32]kgo.Offset, len(from))
	pending := map[tp]bool{}
	for t, parts := range from {
		for p, o := range parts {
			if starts[t] == nil {
				starts[t] = make(map[int32]kgo.Offset, len(parts))
			}
			starts[t][p] = kgo.NewOffset().At(o)
			pending[tp{t, p}] = true
		}
	}
	if len(pending) == 0 {
		return nil
	}
	what := fmt.Sprintf("%d topics", len(starts))
	if len(starts) == 1 {
		for t := range starts {
			what = t
		}
	}
	cl, err := c.NewClient(append([]kgo.Opt{
		kgo.ConsumePartitions(starts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for len(pending) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("broker: reading %s: %d partitions unfinished: %w", what, len(pending), err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil && errors.Is(err, kgo.ErrClientClosed) {
				ferr = fmt.Errorf("broker: reading %s partition %d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		for it := fs.RecordIter(); !it.Done(); {
			rec := it.Next()
			k := tp{rec.Topic, rec.Partition}
			if !pending[k] {
				continue
			}
			done, err := fn(rec)
			if err != nil {
				return err
			}
			if done {
				delete(pending, k)
			}
		}
	}
	return nil
}

// WriteFences appends one fence record to each partition of topic in
// partitions, made by mk, and returns each fence's offset: reading a
// partition with ReadPartitions until that offset reads everything
// committed before it.
func WriteFences(ctx context.Context, c Conn, topic string, partitions []int32, mk func(partition int32) *kgo.Record) (map[int32]int64, error) {
	offs, err := WriteFencesTo(ctx, c, map[string][]int32{topic: partitions}, func(_ string, p int32) *kgo.Record { return mk(p) })
	return offs[topic], err
}

// WriteFencesTo is WriteFences to partitions of several topics, in one
// produce: it returns each fence's offset by topic and partition.
func WriteFencesTo(ctx context.Context, c Conn, parts map[string][]int32, mk func(topic string, partition int32) *kgo.Record) (map[string]map[int32]int64, error) {
	cl, err := c.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for t, ps := range parts {
		for _, p := range ps {
			r := mk(t, p)
			r.Topic, r.Partition = t, p
			recs = append(recs, r)
		}
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		for _, r := range res {
			if r.Err != nil {
				return nil, fmt.Errorf("broker: writing the fences of %s: %w", r.Record.Topic, r.Err)
			}
		}
	}
	offs := make(map[string]map[int32]int64, len(parts))
	for _, r := range res {
		if offs[r.Record.Topic] == nil {
			offs[r.Record.Topic] = map[int32]int64{}
		}
		offs[r.Record.Topic][r.Record.Partition] = r.Record.Offset
	}
	return offs, nil
}

// KgoLogger passes franz-go's warnings and errors to l.
func KgoLogger(l *slog.Logger) kgo.Logger { return kgoLogger{l} }

type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kgoLogger) Log(level kgo.LogLevel, msg string, kv ...any) {
	switch level {
	case kgo.LogLevelError:
		k.l.Error(msg, kv...)
	case kgo.LogLevelWarn:
		k.l.Warn(msg, kv...)
	}
}

// FetchErr returns the error of a poll that a consumer must not go on
// from (its client is closed); the errors of a poll's context ending, and
// those franz-go retries by itself, are not.
func FetchErr(fs kgo.Fetches) error {
	var fatal error
	fs.EachError(func(_ string, _ int32, err error) {
		if fatal == nil && errors.Is(err, kgo.ErrClientClosed) {
			fatal = fmt.Errorf("broker: client closed: %w", err)
		}
	})
	return fatal
}
