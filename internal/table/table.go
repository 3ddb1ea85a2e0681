// Package table reads a compacted topic of one partition as a table: to
// its end before Follow returns, so that the caller starts from the state
// the topic held, then as it changes. onceq's control topic and its token
// store are such tables.
package table

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/broker"
)

// Ensure creates a table's topic if it does not exist: one partition,
// cleanup.policy=compact (broker.TableSpec), and opts' configs.
func Ensure(ctx context.Context, adm *broker.Admin, topic string, opts ...Opt) error {
	spec := broker.TableSpec(topic)
	for _, o := range opts {
		o(spec.Configs)
	}
	if _, err := adm.EnsureTopics(ctx, []broker.TopicSpec{spec}); err != nil {
		return fmt.Errorf("creating %s: %w", topic, err)
	}
	return nil
}

// An Opt adds to a table topic's configs, set when Follow or Ensure
// creates it.
type Opt func(configs map[string]string)

// Config sets a config of the table's topic, such as cleanup.policy
// (compact by default) or retention.ms.
func Config(key, value string) Opt { return func(c map[string]string) { c[key] = value } }

// Configs sets configs of the table's topic, as a catalogue's spec has
// them (broker.LeasesSpec).
func Configs(configs map[string]string) Opt {
	return func(c map[string]string) { maps.Copy(c, configs) }
}

// A Follower applies a topic's records until Close.
type Follower struct {
	cl    *kgo.Client
	topic string
	done  chan struct{}

	mu    sync.Mutex
	pos   int64         // the next offset to apply
	moved chan struct{} // closed when pos moves, then replaced
}

// advance records that everything below next is applied.
func (f *Follower) advance(next int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if next > f.pos {
		f.pos = next
		close(f.moved)
		f.moved = make(chan struct{})
	}
}

// ErrClosed is returned by Sync on a Follower that was closed.
var ErrClosed = errors.New("table: the follower was closed")

// Follow creates topic if it does not exist (with one partition and
// cleanup.policy=compact), reads it as a read_committed consumer up to its
// last stable offset as of the call, and follows it from then on. apply is
// called with every record but transaction markers, in offset order, on
// one goroutine at a time: before Follow returns for what the topic held,
// on the Follower's goroutine after.
func Follow(ctx context.Context, conn broker.Conn, topic string, log *slog.Logger, apply func(*kgo.Record), opts ...Opt) (*Follower, error) {
	adm, err := broker.NewAdmin(conn)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	if err := Ensure(ctx, adm, topic, opts...); err != nil {
		return nil, err
	}
	end, err := lastStable(ctx, adm.Kadm(), topic)
	if err != nil {
		return nil, fmt.Errorf("end of %s: %w", topic, err)
	}
	cl, err := conn.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // markers take offsets: how the end is known
		kgo.WithLogger(broker.KgoLogger(log)),
	)
	if err != nil {
		return nil, err
	}
	f := &Follower{cl: cl, topic: topic, done: make(chan struct{}), moved: make(chan struct{})}
	each := func(rec *kgo.Record) {
		if !rec.Attrs.IsControl() {
			apply(rec)
		}
		f.advance(rec.Offset + 1)
	}
	pos := int64(0)
	for pos < end {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			cl.Close()
			return nil, fmt.Errorf("reading %s: %w", topic, err)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			each(rec)
			pos = rec.Offset + 1
		})
	}
	go func() {
		defer close(f.done)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			fs.EachError(func(_ string, _ int32, err error) {
				log.Warn("reading a table topic", "topic", topic, "err", err)
			})
			fs.EachRecord(each)
		}
	}()
	return f, nil
}

// Sync returns once every record the topic held when Sync was called (up
// to its last stable offset) was applied: a read after Sync sees every
// write acknowledged before it, by this process or another, where a read
// without it may miss one made elsewhere a moment ago. It costs a request
// to the broker. It returns ctx's error if ctx ends first, ErrClosed after
// Close.
func (f *Follower) Sync(ctx context.Context) error {
	select {
	case <-f.done:
		return ErrClosed
	default:
	}
	end, err := lastStable(ctx, kadm.NewClient(f.cl), f.topic)
	if errors.Is(err, kgo.ErrClientClosed) {
		return ErrClosed
	}
	if err != nil {
		return fmt.Errorf("end of %s: %w", f.topic, err)
	}
	for {
		f.mu.Lock()
		pos, moved := f.pos, f.moved
		f.mu.Unlock()
		if pos >= end {
			return nil
		}
		select {
		case <-moved:
		case <-f.done:
			return ErrClosed
		case <-ctx.Done():
			return fmt.Errorf("reading %s to offset %d: %w", f.topic, end, ctx.Err())
		}
	}
}

// TryProduce writes rec to the table's topic with the Follower's own
// client, without waiting for it and without a client of its own: for
// records written often whose loss costs little, such as a server's
// counts (package auth's usage reports). promise, if not nil, is called
// with the outcome; a record the client has no room to buffer fails at
// once (kgo.ErrMaxBuffered). The records of one Follower are written in
// the order given. A writer that must read its write back uses
// Progress.Write instead.
func (f *Follower) TryProduce(ctx context.Context, rec *kgo.Record, promise func(*kgo.Record, error)) {
	rec.Topic = f.topic
	f.cl.TryProduce(ctx, rec, promise)
}

// Flush returns once every record TryProduce buffered was written or
// failed, or ctx's error.
func (f *Follower) Flush(ctx context.Context) error { return f.cl.Flush(ctx) }

// answerWait bounds how long lastStable asks again a partition that
// answers a retriable error.
const answerWait = 30 * time.Second

// lastStable is the last stable offset of the table's partition. On Kafka
// a partition answers UNKNOWN_TOPIC_OR_PARTITION for a moment after
// another process created its topic (a broker knew of it before its
// leader did), and NOT_LEADER_OR_FOLLOWER while its leader moves: a
// retriable error is asked again, for up to answerWait.
func lastStable(ctx context.Context, adm *kadm.Client, topic string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, answerWait)
	defer cancel()
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		ends, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil {
			if o, ok := ends.Lookup(topic, 0); ok {
				return o.Offset, nil
			}
			return 0, nil
		}
		if !kerr.IsRetriable(err) {
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(wait):
		}
	}
}

// Close stops following the topic and returns once apply will not be
// called again.
func (f *Follower) Close() {
	f.cl.Close()
	<-f.done
}
