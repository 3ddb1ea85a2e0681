package onceq

import (
	"hash/fnv"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Record encodes the task as a Kafka record for topic, keyed by its
// PartitionKey. The onceq-queue
// header is written only when topic is not the task's queue (delay buckets,
// dead letters). Unset optional fields write no header; Attempt 1 writes
// none either, since a missing onceq-attempt decodes as 1.
func (t *Task) Record(topic string) *kgo.Record {
	// One allocation holds the record and its usual headers, and one
	// buffer every header value and the key taken from the ID: submission
	// is hot, and these were most of its allocations.
	a := &recordAlloc{}
	n, size := t.headerValues(topic)
	hs := a.headers[:0]
	if n += len(t.Headers); n > len(a.headers) {
		hs = make([]kgo.RecordHeader, 0, n)
	}
	t.EncodeRecord(&a.rec, topic, hs, make([]byte, 0, size))
	return &a.rec
}

// EncodeRecord encodes the task into r as Record does, for a caller that
// keeps its records in storage of its own (the producer allocates each
// record together with what its acknowledgment needs). It sets r's topic,
// key, value and headers and leaves the other fields alone. The headers
// are appended to headers and their values to values: while they have
// room, nothing is allocated; past it, append allocates more, so any
// capacity is correct. The record shares the task's key, payload and
// header values, and values' array: neither may change while the record
// is in use.
func (t *Task) EncodeRecord(r *kgo.Record, topic string, headers []kgo.RecordHeader, values []byte) {
	r.Topic, r.Value = topic, t.Payload
	hs, buf := headers, values
	// A value is the bytes appended for it, capped so that no later
	// append writes into it. An append that outgrows buf moves the later
	// values to a new array and leaves the earlier ones where they are.
	addString := func(k, v string) {
		from := len(buf)
		buf = append(buf, v...)
		hs = append(hs, kgo.RecordHeader{Key: k, Value: buf[from:len(buf):len(buf)]})
	}
	addInt := func(k string, n int64) {
		from := len(buf)
		buf = strconv.AppendInt(buf, n, 10)
		hs = append(hs, kgo.RecordHeader{Key: k, Value: buf[from:len(buf):len(buf)]})
	}
	first := len(hs)
	if t.ID != "" {
		addString(HeaderID, t.ID)
		if t.GeneratedID {
			hs = append(hs, kgo.RecordHeader{Key: HeaderGeneratedID, Value: generatedValue})
		}
	}
	switch { // PartitionKey's, without allocating
	case len(t.Key) > 0:
		r.Key = t.Key
	case t.ID == "":
		r.Key = []byte{}
	case IsLaneQueue(t.Queue):
		from := len(buf)
		buf = append(append(append(buf, t.Queue...), LaneSep), t.ID...)
		r.Key = buf[from:len(buf):len(buf)]
	default:
		r.Key = hs[first].Value // the same bytes: neither is ever changed
	}
	if topic != t.Queue {
		addString(HeaderQueue, t.Queue)
	}
	if !t.Due.IsZero() {
		addInt(HeaderDue, t.Due.UnixMilli())
	}
	if !t.Expires.IsZero() {
		addInt(HeaderExpires, t.Expires.UnixMilli())
	}
	if t.Attempt > 1 {
		addInt(HeaderAttempt, int64(t.Attempt))
	}
	if t.MaxAttempts > 0 {
		addInt(HeaderMaxAttempts, int64(t.MaxAttempts))
	}
	if t.Timeout > 0 {
		addInt(HeaderTimeout, t.Timeout.Milliseconds())
	}
	if !t.Enqueued.IsZero() {
		addInt(HeaderEnqueued, t.Enqueued.UnixMilli())
	}
	if t.LastError != "" {
		addString(HeaderError, CutError(t.LastError))
	}
	if !t.Failed.IsZero() {
		addInt(HeaderFailed, t.Failed.UnixMilli())
	}
	if !t.Backoff.IsZero() {
		addString(HeaderBackoff, FormatBackoff(t.Backoff))
	}
	if t.Requeued != "" {
		addString(HeaderRequeued, t.Requeued)
	}
	if len(t.Workflow) > 0 {
		hs = append(hs, kgo.RecordHeader{Key: HeaderWorkflow, Value: t.Workflow})
	}
	if t.Input != nil {
		hs = append(hs, kgo.RecordHeader{Key: HeaderInput, Value: t.Input})
	}
	if t.Cancel != "" {
		addString(HeaderCancel, CutError(t.Cancel))
	}
	if t.Priority > 0 {
		addInt(HeaderPriority, int64(t.Priority))
	}
	for _, h := range t.Headers {
		hs = append(hs, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	r.Headers = hs
}

// recordAlloc is a record with room for the headers of a plain task: its
// ID, whether it was generated, and its enqueue time.
type recordAlloc struct {
	rec     kgo.Record
	headers [3]kgo.RecordHeader
}

// generatedValue is the value of onceq-id-generated, shared by every
// record: headers are never changed.
var generatedValue = []byte("1")

// headerValues counts the headers Record writes before the task's own, and the
// bytes of their values and of a lane queue's key.
func (t *Task) headerValues(topic string) (headers, size int) {
	str := func(s string) {
		if s != "" {
			headers++
			size += len(s)
		}
	}
	num := func(set bool, n int64) {
		if set {
			headers++
			size += decLen(n)
		}
	}
	str(t.ID)
	if t.GeneratedID && t.ID != "" {
		headers++
	}
	if len(t.Key) == 0 && t.ID != "" && IsLaneQueue(t.Queue) {
		size += len(t.Queue) + 1 + len(t.ID)
	}
	if topic != t.Queue {
		str(t.Queue)
	}
	num(!t.Due.IsZero(), t.Due.UnixMilli())
	num(!t.Expires.IsZero(), t.Expires.UnixMilli())
	num(t.Attempt > 1, int64(t.Attempt))
	num(t.MaxAttempts > 0, int64(t.MaxAttempts))
	num(t.Timeout > 0, t.Timeout.Milliseconds())
	num(!t.Enqueued.IsZero(), t.Enqueued.UnixMilli())
	if t.LastError != "" {
		headers++
		size += min(len(t.LastError), MaxErrorLen)
	}
	num(!t.Failed.IsZero(), t.Failed.UnixMilli())
	if !t.Backoff.IsZero() {
		headers++
		size += 48
	}
	str(t.Requeued)
	if len(t.Workflow) > 0 {
		headers++
	}
	if t.Input != nil {
		headers++
	}
	if t.Cancel != "" {
		headers++
		size += min(len(t.Cancel), MaxErrorLen)
	}
	num(t.Priority > 0, int64(t.Priority))
	return headers, size
}

// decLen is the length of n in decimal, without dividing: a record's
// millisecond times have 13 digits, and a division per digit was a tenth
// of encoding a task.
func decLen(n int64) int {
	if n < 0 {
		if n == math.MinInt64 {
			return 20
		}
		return 1 + decLen(-n)
	}
	u := uint64(n)
	t := bits.Len64(u) * 1233 >> 12 // log10(2) is about 1233/4096
	if u < pow10[t] {
		return max(t, 1)
	}
	return t + 1
}

var pow10 = [...]uint64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19}

// CutError bounds an error text to MaxErrorLen bytes and makes it ASCII, as
// the onceq-error header requires.
func CutError(s string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= MaxErrorLen {
			break
		}
		switch {
		case r == '\n' || r == '\t':
			b.WriteByte(' ')
		case r >= ' ' && r < 0x7f:
			b.WriteRune(r)
		default:
			b.WriteByte('?')
		}
	}
	return b.String()
}

// FromRecord decodes a task from a Kafka record. The queue is the
// onceq-queue header or, without one, the record's topic. A record without
// onceq-id gets the ID "<topic>/<partition>/<offset>", so plain Kafka records
// run once too. Malformed onceq headers are an error naming the header, and
// so is a header with the onceq- prefix that is not one of the wire format's
// (a typo such as onceq-delay would otherwise run the task at once); other
// headers pass through in order.
func FromRecord(r *kgo.Record) (Task, error) {
	t := Task{
		Queue:   r.Topic,
		Key:     r.Key,
		Payload: r.Value,
		Attempt: 1,
	}
	var seen uint32
	for _, h := range r.Headers {
		bit := headerBit(h.Key)
		if bit == 0 {
			if strings.HasPrefix(h.Key, HeaderPrefix) {
				return Task{}, unknownHeader(h.Key)
			}
			t.Headers = append(t.Headers, Header{Key: h.Key, Value: h.Value})
			continue
		}
		if seen&bit != 0 {
			return Task{}, invalid(ErrMalformedHeader, "header "+h.Key, string(h.Value), "the header appears more than once")
		}
		seen |= bit
		if err := t.setHeader(h.Key, h.Value); err != nil {
			return Task{}, err
		}
	}
	if t.ID == "" {
		if t.GeneratedID {
			return Task{}, invalid(ErrMalformedHeader, "header "+HeaderGeneratedID, "1", "it describes onceq-id, and the record has none")
		}
		t.ID = RecordID(r.Topic, r.Partition, r.Offset)
		// An ID taken from the offset is unique, like a generated one.
		t.GeneratedID = true
	}
	if len(t.Key) == 0 {
		t.Key = nil
	}
	return t, nil
}

// RecordID is the ID of a record that has no onceq-id header:
// "<topic>/<partition>/<offset>". A topic too long for that to fit in
// MaxIDLen is shortened to a prefix and a hash of the whole name.
func RecordID(topic string, partition int32, offset int64) string {
	suffix := "/" + itoa(int64(partition)) + "/" + itoa(offset)
	if len(topic)+len(suffix) > MaxIDLen {
		h := fnv.New64a()
		h.Write([]byte(topic))
		topic = topic[:MaxIDLen-len(suffix)-17] + "~" + strconv.FormatUint(h.Sum64()|1<<63, 16)
	}
	return topic + suffix
}

// unknownHeader is the error for a header with onceq's prefix that is not
// one of its wire format's.
func unknownHeader(key string) *Error {
	return invalid(ErrMalformedHeader, "header", key, "not a header of onceq's wire format (%s): drop the %q prefix from headers of your own",
		strings.Join(headerNames[:], ", "), HeaderPrefix)
}

// headerNames are the headers of the wire format.
var headerNames = [...]string{HeaderID, HeaderQueue, HeaderDue, HeaderExpires, HeaderAttempt, HeaderMaxAttempts, HeaderTimeout,
	HeaderEnqueued, HeaderError, HeaderFailed, HeaderBackoff, HeaderRequeued, HeaderGeneratedID, HeaderWorkflow, HeaderInput, HeaderCancel,
	HeaderPriority}

// headerBit numbers the onceq headers FromRecord decodes, for finding
// repeats; 0 for any other header. A switch, not a map: every header of
// every record goes through it.
func headerBit(key string) uint32 {
	if !strings.HasPrefix(key, HeaderPrefix) {
		return 0
	}
	switch key {
	case HeaderID:
		return 1 << 0
	case HeaderQueue:
		return 1 << 1
	case HeaderDue:
		return 1 << 2
	case HeaderExpires:
		return 1 << 3
	case HeaderAttempt:
		return 1 << 4
	case HeaderMaxAttempts:
		return 1 << 5
	case HeaderTimeout:
		return 1 << 6
	case HeaderEnqueued:
		return 1 << 7
	case HeaderError:
		return 1 << 8
	case HeaderFailed:
		return 1 << 9
	case HeaderBackoff:
		return 1 << 10
	case HeaderRequeued:
		return 1 << 11
	case HeaderGeneratedID:
		return 1 << 12
	case HeaderWorkflow:
		return 1 << 13
	case HeaderInput:
		return 1 << 14
	case HeaderCancel:
		return 1 << 15
	case HeaderPriority:
		return 1 << 16
	}
	return 0
}

func (t *Task) setHeader(key string, v []byte) error {
	switch key {
	case HeaderAttempt, HeaderMaxAttempts, HeaderTimeout, HeaderDue, HeaderExpires, HeaderEnqueued, HeaderFailed, HeaderPriority:
		return t.setNumber(key, v)
	}
	s := string(v)
	switch key {
	case HeaderID:
		if err := ValidateID(s); err != nil {
			return invalid(ErrMalformedHeader, "header "+key, s, "%v", err.(*Error).Hint)
		}
		t.ID = s
	case HeaderQueue:
		if err := checkQueueHeader(s); err != nil {
			return err
		}
		t.Queue = s
	case HeaderError:
		t.LastError = CutError(s)
	case HeaderBackoff:
		b, err := ParseBackoff(s)
		if err != nil {
			return invalid(ErrMalformedHeader, "header "+key, s, "%v", err.(*Error).Hint)
		}
		t.Backoff = b
	case HeaderRequeued:
		if err := ValidateID(s); err != nil {
			return invalid(ErrMalformedHeader, "header "+key, s, "want <partition>/<offset> of a dead letter")
		}
		t.Requeued = s
	case HeaderGeneratedID:
		if s != "1" {
			return invalid(ErrMalformedHeader, "header "+key, s, "want 1, or no header for an ID a client chose")
		}
		t.GeneratedID = true
	case HeaderWorkflow:
		if len(v) == 0 {
			return invalid(ErrMalformedHeader, "header "+key, s, "the value is empty: a task outside workflows has no such header")
		}
		t.Workflow = v
	case HeaderInput:
		t.Input = v
		if v == nil {
			t.Input = []byte{} // an empty result is still an input
		}
	case HeaderCancel:
		if s == "" {
			return invalid(ErrMalformedHeader, "header "+key, s, "the value is empty: want why the task must not run")
		}
		t.Cancel = CutError(s)
	}
	return nil
}

// setNumber decodes the headers whose values are decimal numbers, without
// copying them.
func (t *Task) setNumber(key string, v []byte) error {
	switch key {
	case HeaderAttempt, HeaderMaxAttempts:
		n, err := parseUint(key, v, MaxAttemptCount)
		if err != nil {
			return err
		}
		if key == HeaderAttempt {
			if n == 0 {
				return invalid(ErrMalformedHeader, "header "+key, string(v), "attempts count from 1")
			}
			t.Attempt = int(n)
		} else {
			t.MaxAttempts = int(n)
		}
	case HeaderPriority:
		n, err := parseUint(key, v, MaxPriority)
		if err != nil {
			return err
		}
		t.Priority = int(n)
	case HeaderTimeout:
		n, err := parseUint(key, v, int64(time.Duration(1<<63-1)/time.Millisecond))
		if err != nil {
			return err
		}
		t.Timeout = time.Duration(n) * time.Millisecond
	default: // the four times
		n, err := parseUint(key, v, MaxUnixMilli)
		if err != nil {
			return err
		}
		tm := time.UnixMilli(n)
		switch key {
		case HeaderDue:
			t.Due = tm
		case HeaderExpires:
			t.Expires = tm
		case HeaderEnqueued:
			t.Enqueued = tm
		case HeaderFailed:
			t.Failed = tm
		}
	}
	return nil
}

// parseUint parses a canonical decimal (digits only, no sign, no leading
// zeros) no larger than max.
func parseUint(key string, v []byte, max int64) (int64, error) {
	bad := func(hint string) error {
		return invalid(ErrMalformedHeader, "header "+key, string(v), hint)
	}
	if len(v) == 0 {
		return 0, bad("the value is empty: want a decimal number")
	}
	if len(v) > 1 && v[0] == '0' {
		return 0, bad("leading zeros are not allowed")
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, bad("want a non-negative decimal number (milliseconds for times and durations)")
		}
		d := int64(c - '0')
		if n > (max-d)/10 {
			return 0, bad("the number is out of range")
		}
		n = n*10 + d
	}
	return n, nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// FormatBackoff writes a backoff as the onceq-backoff header value:
// "<base ms>:<factor>:<max ms>", for example "1000:2:3600000".
func FormatBackoff(b Backoff) string {
	return itoa(b.Base.Milliseconds()) + ":" + strconv.FormatFloat(b.Factor, 'f', -1, 64) + ":" + itoa(b.Max.Milliseconds())
}

// ParseBackoff reads an onceq-backoff value. Base and max are positive
// milliseconds with max >= base; the factor is between 1 and 100.
func ParseBackoff(s string) (Backoff, error) {
	bad := func(hint string) (Backoff, error) {
		return Backoff{}, invalid(ErrMalformedHeader, "header "+HeaderBackoff, s, hint)
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return bad("want <base ms>:<factor>:<max ms>, for example 1000:2:3600000")
	}
	base, err := parseUint(HeaderBackoff, []byte(parts[0]), int64(365*24*time.Hour/time.Millisecond))
	if err != nil || base == 0 {
		return bad("the base is a positive number of milliseconds")
	}
	maxMS, err := parseUint(HeaderBackoff, []byte(parts[2]), int64(365*24*time.Hour/time.Millisecond))
	if err != nil || maxMS < base {
		return bad("the max is milliseconds, at least the base")
	}
	f, err := strconv.ParseFloat(parts[1], 64)
	if err != nil || !(f >= 1 && f <= 100) {
		return bad("the factor is a number from 1 to 100")
	}
	b := Backoff{Base: time.Duration(base) * time.Millisecond, Factor: f, Max: time.Duration(maxMS) * time.Millisecond}
	if FormatBackoff(b) != s {
		return bad("write it canonically, as " + FormatBackoff(b))
	}
	return b, nil
}

// DedupKeyOf returns the DedupKey of the task a record holds and whether
// it is an idempotency key (Task.IdempotencyKey), reading only the headers
// it needs; both equal FromRecord's for every record FromRecord accepts.
func DedupKeyOf(r *kgo.Record) (key string, idempotent bool) {
	t := Task{Attempt: 1}
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderID:
			t.ID = string(h.Value)
		case HeaderQueue:
			t.Queue = string(h.Value)
		case HeaderRequeued:
			t.Requeued = string(h.Value)
		case HeaderGeneratedID:
			t.GeneratedID = true
		case HeaderAttempt:
			if n, err := parseUint(h.Key, h.Value, MaxAttemptCount); err == nil && n > 0 {
				t.Attempt = int(n)
			}
		}
	}
	if t.ID == "" {
		t.ID = RecordID(r.Topic, r.Partition, r.Offset)
		t.GeneratedID = true
	}
	return t.DedupKey(), t.IdempotencyKey()
}
