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
	adm, err := NewAdmin(c)
	if err != nil {
		return err
	}
	info, err := adm.DescribeTopic(ctx, topic)
	adm.Close()
	if err != nil {
		return err
	}
	starts := map[int32]kgo.Offset{}
	ends := map[int32]int64{} // partitions not read to their end yet
	for _, p := range info.Partitions {
		if p.Stable > p.Start {
			starts[p.Partition] = kgo.NewOffset().At(p.Start)
			ends[p.Partition] = p.Stable
		}
	}
	if len(ends) == 0 {
		return nil
	}
	cl, err := c.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: starts}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers are delivered so that a partition whose
		// last stable offset follows a marker is seen to be finished.
		kgo.KeepControlRecords(),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	for len(ends) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("broker: reading %s: %w", topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, p int32, err error) {
			if ferr == nil && errors.Is(err, kgo.ErrClientClosed) {
				ferr = fmt.Errorf("broker: reading %s partition %d: %w", topic, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		for it := fs.RecordIter(); !it.Done(); {
			rec := it.Next()
			end, ok := ends[rec.Partition]
			if !ok || rec.Offset >= end {
				continue
			}
			if rec.Offset >= end-1 {
				delete(ends, rec.Partition)
			}
			if rec.Attrs.IsControl() {
				continue
			}
			if err := fn(rec); err != nil {
				return err
			}
		}
	}
	return nil
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
