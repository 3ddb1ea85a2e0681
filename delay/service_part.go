package delay

import (
	"container/heap"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// maxBuf bounds the records a stopped partition keeps from its fetches.
// One fetch returns at most the client's FetchMaxPartitionBytes of a
// partition, and a stopped partition is paused, so this is a safety net:
// beyond it the rest is dropped and fetched again when the partition
// resumes, which costs the client a new fetch session.
const maxBuf = 20_000

// cursor is a bucket partition's committed progress. Every record at an
// offset below High whose release time (ReleaseAt with Smallest) is at or
// before Time has moved on; no other record has. Offset is the first
// record that has not: where reading starts again.
//
// The cursor is committed with the partition's offset, as the offset
// commit's metadata, in the transaction that moves the records. Records
// move out of offset order (a record held until its due time does not
// hold back the records behind it), and this is what tells a restarted
// reader which records between Offset and High to skip.
//
// A new cursor must claim everything the committed one claims: a reader
// that starts again at Offset commits nothing for the partition until it
// has read up to High (see part.committable). Its next cursor then has a
// High and a Time no lower than the committed ones.
type cursor struct {
	Offset   int64 // -1: nothing committed
	High     int64
	Time     int64 // unix milliseconds
	Smallest int64 // milliseconds
}

const metaPrefix = "onceq-delay/1 "

// encode writes the cursor's metadata: "onceq-delay/1 H T S".
func (c cursor) encode() string {
	return metaPrefix + strconv.FormatInt(c.High, 10) + " " + strconv.FormatInt(c.Time, 10) + " " + strconv.FormatInt(c.Smallest, 10)
}

// parseCursor reads a committed offset and its metadata. Metadata that is
// not the service's (empty, or committed by another tool) means that no
// record above the offset has moved.
func parseCursor(offset int64, meta string) (cursor, error) {
	c := cursor{Offset: offset, High: offset}
	if meta == "" || !strings.HasPrefix(meta, "onceq-delay/") {
		return c, nil
	}
	rest, ok := strings.CutPrefix(meta, metaPrefix)
	f := strings.Split(rest, " ")
	if !ok || len(f) != 3 {
		return c, fmt.Errorf("delay: offset metadata %q: want %q and three numbers", meta, metaPrefix)
	}
	var n [3]int64
	for i, s := range f {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			return c, fmt.Errorf("delay: offset metadata %q: field %d is not a non-negative number", meta, i+1)
		}
		n[i] = v
	}
	if n[0] < offset {
		return c, fmt.Errorf("delay: offset metadata %q: high mark %d is below the committed offset %d", meta, n[0], offset)
	}
	if n[2] == 0 {
		return c, fmt.Errorf("delay: offset metadata %q: the smallest bucket is zero", meta)
	}
	return cursor{Offset: offset, High: n[0], Time: n[1], Smallest: n[2]}, nil
}

// moved reports whether a record at offset, released at release, moved
// before the cursor was committed.
func (c cursor) moved(offset int64, release func(smallest time.Duration) int64) bool {
	return offset < c.High && release(time.Duration(c.Smallest)*time.Millisecond) <= c.Time
}

// entry is a record read and not yet moved.
type entry struct {
	rec   *kgo.Record
	moved bool
}

// part is the service's state of one assigned bucket partition. Only the
// service loop touches it, except revoked, which the group callbacks set.
type part struct {
	topic     string
	partition int32
	bucket    time.Duration
	readAhead time.Duration
	smallest  time.Duration // the smallest bucket release times use
	label     string        // the bucket's name, for metrics
	revoked   atomic.Bool

	loaded    bool   // committed holds what the group committed
	committed cursor // the last committed cursor
	next      int64  // offset after the last record read; -1: none yet
	epoch     int32  // leader epoch of the last record read

	// A stopped partition is paused in the client: the record at buf[0]
	// is not to be read before wake (or, with budget, before the held
	// budget has room). seek >= 0 means buf was cut short there.
	stopped bool
	budget  bool
	wake    time.Time
	buf     []*kgo.Record
	seek    int64

	fifo []*entry // in offset order; moved entries are removed from the front
	head int
	byRelease
}

func newPart(p *Planner, topic string, partition int32, bucket time.Duration) *part {
	return &part{
		topic: topic, partition: partition, bucket: bucket, readAhead: p.ReadAhead(bucket), smallest: p.Smallest(),
		label: bucketLabel(bucket), next: -1, epoch: -1, seek: -1,
		committed: cursor{Offset: -1, High: -1},
	}
}

// releaseOf returns a record's release time in unix milliseconds with the
// given smallest bucket. A record without one well-formed onceq-due header
// is released at its append time, to be dead-lettered when it moves.
//
// Only onceq-due is read here, so that reading a bucket stays cheap; the
// move decodes the whole record. Either way the release depends on the
// record alone, as the committed cursors need.
func releaseOf(r *kgo.Record, bucket, smallest time.Duration) int64 {
	due, ok := dueMillis(r)
	if !ok {
		return r.Timestamp.UnixMilli()
	}
	return ReleaseAt(r.Timestamp, bucket, smallest, time.UnixMilli(due)).UnixMilli()
}

// dueMillis reads the onceq-due header as onceq.FromRecord does
// (onceq.PeekDue): exactly one, a canonical decimal of unix milliseconds.
func dueMillis(r *kgo.Record) (int64, bool) {
	due, found, err := onceq.PeekDue(r)
	return due, found && err == nil
}

// push adds a record read in offset order, released at release (unix ms).
func (p *part) push(r *kgo.Record, release int64) {
	e := &entry{rec: r}
	p.fifo = append(p.fifo, e)
	heap.Push(&p.byRelease, releaseItem{release: release, offset: r.Offset, e: e})
}

// due pops the entries released at or before t (unix ms), marking them
// moved.
func (p *part) due(t int64, out []*entry) []*entry {
	for len(p.byRelease) > 0 && p.byRelease[0].release <= t {
		h := heap.Pop(&p.byRelease).(releaseItem)
		h.e.moved = true
		out = append(out, h.e)
	}
	return out
}

// firstUnmoved drops moved entries from the front of the FIFO and returns
// the offset of the first record not moved: the partition's commit offset.
func (p *part) firstUnmoved() int64 {
	for p.head < len(p.fifo) && p.fifo[p.head].moved {
		p.fifo[p.head] = nil
		p.head++
	}
	if p.head > 1024 && p.head > len(p.fifo)/2 {
		p.fifo = append(p.fifo[:0], p.fifo[p.head:]...)
		p.head = 0
	}
	if p.head < len(p.fifo) {
		return p.fifo[p.head].rec.Offset
	}
	return p.next
}

// committable reports whether the partition may move records in a
// transaction at now (unix ms). Its new cursor must claim every record the
// committed one claims, so the partition must have read up to the committed
// high mark again (after a restart, a new assignment or an aborted
// transaction) and now must not be before the committed time (another
// instance's clock may run ahead).
func (p *part) committable(now int64) bool {
	return p.loaded && !p.revoked.Load() && p.next >= p.committed.High && now >= p.committed.Time
}

// unmoved is the number of entries read and not moved yet: this
// partition's share of the service's held records.
func (p *part) unmoved() int { return len(p.byRelease) }

// nextRelease is the earliest release among the unmoved entries.
func (p *part) nextRelease() (int64, bool) {
	if len(p.byRelease) == 0 {
		return 0, false
	}
	return p.byRelease[0].release, true
}

// reset drops everything read since the last commit: reading starts again
// at the committed offset.
func (p *part) reset() {
	p.fifo, p.head, p.byRelease = nil, 0, nil
	p.buf, p.stopped, p.budget, p.seek = nil, false, false, -1
	p.next = p.committed.Offset
}

// releaseItem is an entry in the release heap; the keys are copied in so
// that the heap never follows a pointer to compare.
type releaseItem struct {
	release int64
	offset  int64
	e       *entry
}

// byRelease is a min-heap of entries by release time, then offset.
type byRelease []releaseItem

func (h byRelease) Len() int { return len(h) }
func (h byRelease) Less(i, j int) bool {
	if h[i].release != h[j].release {
		return h[i].release < h[j].release
	}
	return h[i].offset < h[j].offset
}
func (h byRelease) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *byRelease) Push(x any)   { *h = append(*h, x.(releaseItem)) }
func (h *byRelease) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = releaseItem{}
	*h = old[:len(old)-1]
	return e
}
