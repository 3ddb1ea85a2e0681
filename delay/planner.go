package delay

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq/broker"
)

// DefaultBuckets is the default ladder: 1s 5s 30s 2m 10m 1h 6h 1d.
var DefaultBuckets = []time.Duration{
	time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute,
	10 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour,
}

// ErrLadder is wrapped by every invalid bucket ladder.
var ErrLadder = errors.New("invalid bucket ladder")

// BucketTopicConfigs are the topic configs every bucket topic is created
// with (broker.BucketSpec): the broker stamps each record with its append
// time, so producers' clock skew cannot reorder a bucket partition.
func BucketTopicConfigs() map[string]string { return broker.BucketSpec("").Configs }

// MaxBucket is the longest bucket of a ladder, 365 days. A record waits a
// whole bucket in its topic, so the topic's retention must be longer than
// its bucket.
const MaxBucket = 365 * 24 * time.Hour

// DefaultBucketPartitions is the partition count of a bucket topic onceq
// creates (broker.BucketSpec). Several delay service instances share a
// bucket's partitions.
const DefaultBucketPartitions = broker.BucketPartitions

// Kind says where a Hop goes.
type Kind uint8

const (
	// ToQueue publishes the record to its queue now: it is due.
	ToQueue Kind = iota
	// ToTimer holds the record in memory for Hop.Wait, then publishes it
	// to its queue: it is due within less than the smallest bucket.
	ToTimer
	// ToBucket writes the record to the bucket topic Hop.Topic, where it
	// waits Hop.Bucket from its append time.
	ToBucket
)

func (k Kind) String() string {
	switch k {
	case ToQueue:
		return "queue"
	case ToTimer:
		return "timer"
	case ToBucket:
		return "bucket"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Hop is the next step of a delayed record.
type Hop struct {
	Kind Kind
	// Bucket and Topic are set for ToBucket.
	Bucket time.Duration
	Topic  string
	// Wait is set for ToTimer: how long until the record is due.
	Wait time.Duration
}

func (h Hop) String() string {
	switch h.Kind {
	case ToBucket:
		return "bucket " + broker.FormatBucket(h.Bucket) + " " + h.Topic
	case ToTimer:
		return "timer " + h.Wait.String()
	}
	return h.Kind.String()
}

// Planner decides the hops of delayed records on a ladder of buckets. It is
// pure (no Kafka, no clock) and safe for concurrent use.
//
// For the remaining delay r = due - now, the next hop is the largest bucket
// b <= r. A record in bucket b moves on at its append time plus b; then r
// is recomputed from the absolute due time, so lateness does not add up
// across hops and a slow hop never makes a record early. Below the smallest
// bucket the delay service holds the record in a timer until it is due.
//
// The number of hops is bounded: greedily, r/largest hops of the largest
// bucket, then fewer than (next larger / this) of each smaller one. A task
// a year away on the default ladder takes 365 hops of 1d and at most 29
// more for a remainder under a day: 394 at most (see Hops).
type Planner struct {
	buckets []time.Duration // ascending
	topics  []string        // topics[i] is the topic of buckets[i]
}

// NewPlanner checks a ladder and returns its planner. The buckets may come
// in any order; they must be positive, at most MaxBucket, whole
// milliseconds (the wire format's precision) and distinct.
func NewPlanner(buckets []time.Duration) (*Planner, error) {
	if len(buckets) == 0 {
		return nil, ladderErr("no buckets: give at least one, for example %s", FormatLadder(DefaultBuckets))
	}
	bs := slices.Clone(buckets)
	slices.Sort(bs)
	for i, b := range bs {
		switch {
		case b <= 0:
			return nil, ladderErr("bucket %v: want a positive duration", b)
		case b > MaxBucket:
			return nil, ladderErr("bucket %v: at most %s (MaxBucket)", b, broker.FormatBucket(MaxBucket))
		case b%time.Millisecond != 0:
			return nil, ladderErr("bucket %v: want whole milliseconds, such as %v", b, b.Truncate(time.Millisecond)+time.Millisecond)
		case i > 0 && bs[i-1] == b:
			return nil, ladderErr("bucket %s appears twice: give each bucket once", broker.FormatBucket(b))
		}
	}
	p := &Planner{buckets: bs, topics: make([]string, len(bs))}
	for i, b := range bs {
		p.topics[i] = broker.DelayTopic(b)
	}
	return p, nil
}

// DefaultPlanner returns the planner of DefaultBuckets.
func DefaultPlanner() *Planner {
	p, err := NewPlanner(DefaultBuckets)
	if err != nil {
		panic(err) // DefaultBuckets is valid
	}
	return p
}

func ladderErr(format string, args ...any) error {
	return fmt.Errorf("delay: %s: %w", fmt.Sprintf(format, args...), ErrLadder)
}

// ParseLadder reads a ladder such as "1s 5s 30s 2m" or "100ms,500ms,2s"
// (bucket names as broker.ParseBucket reads them) and checks it.
func ParseLadder(s string) (*Planner, error) {
	var bs []time.Duration
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		b, err := parseBucket(f)
		if err != nil {
			return nil, err
		}
		bs = append(bs, b)
	}
	return NewPlanner(bs)
}

// parseBucket reads one bucket of a ladder: a number of days ("1d") or a
// Go duration, positive, whole milliseconds and at most MaxBucket. Days
// are counted here, so that too many of them are refused instead of
// overflowing into a negative (or any) duration.
func parseBucket(f string) (time.Duration, error) {
	const day = 24 * time.Hour
	tooLong := func() error {
		return ladderErr("bucket %q: at most %s (MaxBucket)", f, broker.FormatBucket(MaxBucket))
	}
	if n, ok := strings.CutSuffix(f, "d"); ok && n != "" && strings.Trim(n, "0123456789") == "" {
		days, err := strconv.ParseUint(n, 10, 64)
		switch {
		case err != nil || days > uint64(MaxBucket/day): // digits only: out of range
			return 0, tooLong()
		case days > 0:
			return time.Duration(days) * day, nil
		}
	}
	b, err := time.ParseDuration(f)
	switch {
	case err != nil && strings.Contains(err.Error(), "invalid duration") && strings.Trim(f, "0123456789.nsuµmh") == "":
		return 0, tooLong() // digits and units only: out of range
	case err != nil || b <= 0 || b%time.Millisecond != 0:
		return 0, ladderErr("bucket %q: want a positive whole number of milliseconds such as 100ms, 5s, 2m, 6h or 1d", f)
	case b > MaxBucket:
		return 0, tooLong()
	}
	return b, nil
}

// FormatLadder writes buckets as ParseLadder reads them: "1s 5s 30s".
func FormatLadder(buckets []time.Duration) string {
	names := make([]string, len(buckets))
	for i, b := range buckets {
		names[i] = broker.FormatBucket(b)
	}
	return strings.Join(names, " ")
}

// Buckets returns the ladder, ascending. The caller may modify the slice.
func (p *Planner) Buckets() []time.Duration { return slices.Clone(p.buckets) }

// Topics returns the bucket topics, in the order of Buckets.
func (p *Planner) Topics() []string { return slices.Clone(p.topics) }

// Smallest returns the smallest bucket.
func (p *Planner) Smallest() time.Duration { return p.buckets[0] }

// Bucket returns the bucket whose topic is topic, if it is on this ladder.
func (p *Planner) Bucket(topic string) (time.Duration, bool) {
	for i, t := range p.topics {
		if t == topic {
			return p.buckets[i], true
		}
	}
	return 0, false
}

// Next returns the next hop of a record due at due, at now: the queue when
// it is due, a timer when less than the smallest bucket remains, otherwise
// the largest bucket no longer than the remaining delay.
func (p *Planner) Next(now, due time.Time) Hop {
	r := due.Sub(now)
	switch {
	case r <= 0:
		return Hop{Kind: ToQueue}
	case r < p.buckets[0]:
		return Hop{Kind: ToTimer, Wait: r}
	}
	i := p.largestAtMost(r)
	return Hop{Kind: ToBucket, Bucket: p.buckets[i], Topic: p.topics[i]}
}

// Route returns where a producer writes a newly submitted record: its queue
// when it is due, otherwise a bucket. A record due within less than the
// smallest bucket goes to the smallest bucket, never to the queue, which
// would make it early; the delay service releases it at its due time (see
// MoveAt).
func (p *Planner) Route(now, due time.Time) Hop {
	h := p.Next(now, due)
	if h.Kind == ToTimer {
		return Hop{Kind: ToBucket, Bucket: p.buckets[0], Topic: p.topics[0]}
	}
	return h
}

// MoveAt is when a record appended to bucket at appended, due at due, moves
// on: its append time plus the bucket, or its due time if that is earlier.
// Only records the producer routed to the smallest bucket (see Route) or
// records written under clock skew are due before their bucket ends; either
// way the move then compares due with the service's clock (Next), so a
// record is never published early.
func MoveAt(appended time.Time, bucket time.Duration, due time.Time) time.Time {
	end := appended.Add(bucket)
	if due.Before(end) {
		return due
	}
	return end
}

// Hops returns how many bucket hops a record due at due takes from now,
// assuming each hop takes exactly its bucket. The final timer, if any, is
// not a hop.
func (p *Planner) Hops(now, due time.Time) int {
	r := due.Sub(now)
	n := 0
	for i := len(p.buckets) - 1; i >= 0 && r > 0; i-- {
		n += int(r / p.buckets[i])
		r %= p.buckets[i]
	}
	return n
}

// largestAtMost returns the index of the largest bucket <= r; r is at least
// the smallest bucket.
func (p *Planner) largestAtMost(r time.Duration) int {
	i, found := slices.BinarySearch(p.buckets, r)
	if found {
		return i
	}
	return i - 1
}

// ReleaseAt is when the delay service takes a record out of bucket:
// MoveAt (its append time plus the bucket), unless less than smallest
// would remain after that, in which case it is held in memory until its
// due time and published to its queue directly. A record due before its
// bucket ends is released at its due time.
//
// The service's offset commits record which records moved as "offset below
// H and ReleaseAt at or before T" (see Service), so ReleaseAt must depend
// on the record alone, never on when it was read.
func ReleaseAt(appended time.Time, bucket, smallest time.Duration, due time.Time) time.Time {
	end := appended.Add(bucket)
	if due.Before(end.Add(smallest)) {
		return due
	}
	return end
}

// ReadAhead is how long before a record's release the delay service reads
// it into memory, so that records behind it in the same bucket partition
// that are released earlier are not held up. A bucket larger than the
// smallest only holds records whose release is within the smallest bucket
// of the record before them; the smallest bucket also holds records that
// producers routed there with less than the smallest bucket to wait
// (Route), which are released up to one bucket before the end of it.
func (p *Planner) ReadAhead(bucket time.Duration) time.Duration {
	if bucket <= p.buckets[0] {
		return 2 * p.buckets[0]
	}
	return p.buckets[0]
}

// DueWithin estimates the fraction of the records waiting in bucket that
// fall due within d from now. It assumes a steady flow: a record entered
// the bucket with a remaining delay r uniform between the bucket and the
// next larger one (twice the bucket for the largest), and has waited u,
// uniform between zero and the bucket; it is due in r-u. The estimate is
// exact for delays spread evenly and needs nothing but the bucket's size.
func (p *Planner) DueWithin(bucket, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	b, n := bucket.Seconds(), 2*bucket.Seconds()
	if i, ok := slices.BinarySearch(p.buckets, bucket); ok && i+1 < len(p.buckets) {
		n = p.buckets[i+1].Seconds()
	}
	// g is the integral of the CDF of r, from -inf to x.
	g := func(x float64) float64 {
		switch {
		case x <= b:
			return 0
		case x <= n:
			return (x - b) * (x - b) / (2 * (n - b))
		}
		return (n-b)/2 + x - n
	}
	h := d.Seconds()
	return min(1, max(0, (g(h+b)-g(h))/b))
}
