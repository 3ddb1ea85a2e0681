package inspect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/onceq/onceq"
)

// The view's Pebble key layout. Queue names and task IDs never hold a
// zero byte, which ends them.
//
//	r <queue> 0 <id>                          -> meta, then the record's JSON line
//	i <queue> 0 <state> <last time, 8 bytes BE ms> <id>  -> priority, 1 byte: the index
//	d <queue> 0 <due, 8 bytes BE ms> <id>     -> (empty): scheduled and retrying tasks by due time
//	a <queue> 0 <id> 0 <attempt, 4 bytes BE>  -> the JSON line of a failed attempt that was retried
//	o <topic> 0 <partition, 4 bytes BE>       -> next offset, 8 bytes BE
//	t <topic> 0                               -> the topic's ID, 16 bytes: the topic the offsets are of
//	v                                         -> viewFormat, 1 byte
const (
	prefixRecord  = 'r'
	prefixIndex   = 'i'
	prefixDue     = 'd'
	prefixAttempt = 'a'
	prefixOffset  = 'o'
	prefixTopicID = 't'
	keyFormat     = 'v'
)

// viewFormat numbers the layout above and the meta's; a stored view of
// another is rebuilt. 2: the meta holds the task's priority. 3: failed
// attempts are kept (prefixAttempt), and the meta says so. 4: the state
// running (its index moves the later states' up by one); an index entry
// holds its task's priority.
const viewFormat = 4

// meta is what a stored record's value starts with: enough to find its
// index entry and to judge a newer record without decoding its JSON.
type meta struct {
	state  byte  // index in onceq.TaskStates
	last   int64 // unix ms of its last transition
	worker bool  // a worker wrote it (not a producer's pending record)
	prio   byte  // the task's priority
	due    int64 // unix ms it is due, when scheduled or retrying; else 0
	// retried: the view keeps records of the task's failed attempts
	// (prefixAttempt), which go with it.
	retried bool
}

const metaLen = 18

// final reports whether m's record ends its task.
func (m meta) final() bool {
	return int(m.state) < len(onceq.TaskStates) && onceq.TaskStates[m.state].Final()
}

// supersedes reports whether a task's record m replaces old, the record
// the view holds of it. A worker's record always does: a worker writes a
// task's transitions in order. A record without a worker never replaces
// a worker's final record, and a producer's (pending or scheduled: the
// task's submission) no final record at all, so that a late duplicate
// does not make a finished task look pending again; a final record
// without a worker (the record of a task whose queue record was deleted
// unrun: a destroyed queue's) ends its task, whatever it was before.
//
// A worker's running record replaces a final record only if its run
// started after that record's transition: the run of a task requeued
// from the dead letters, not a run that its worker lost (its partition
// moved, and its next owner ended the task first).
func (m meta) supersedes(old meta) bool {
	switch {
	case m.worker && m.state == stateRunning && old.final():
		return m.last > old.last
	case m.worker:
		return true
	case m.final():
		return !old.worker || !old.final()
	}
	return !old.worker && !old.final()
}

// put writes m into b, metaLen bytes.
func (m meta) put(b []byte) {
	b[0] = m.state
	binary.BigEndian.PutUint64(b[1:9], uint64(m.last))
	b[9] = m.prio << 1
	if m.worker {
		b[9] |= 1
	}
	if m.retried {
		b[9] |= 0x80
	}
	binary.BigEndian.PutUint64(b[10:18], uint64(m.due))
}

func decodeMeta(v []byte) (meta, []byte, error) {
	if len(v) < metaLen || int(v[0]) >= len(onceq.TaskStates) || (v[9]>>1)&0x3f > onceq.MaxPriority {
		return meta{}, nil, errors.New("inspect: corrupt view record: rebuild the view (remove its directory)")
	}
	return meta{state: v[0], last: int64(binary.BigEndian.Uint64(v[1:9])), worker: v[9]&1 == 1, prio: (v[9] >> 1) & 0x3f,
		due: int64(binary.BigEndian.Uint64(v[10:18])), retried: v[9]&0x80 != 0}, v[metaLen:], nil
}

// tally is what the view counts of a queue's tasks: per state, by index
// in onceq.TaskStates, the unfinished ones per priority, and the failed
// attempts kept (prefixAttempt).
type tally struct {
	states   [8]int64
	prio     [onceq.MaxPriority + 1]int64
	attempts int64
}

// failed counts the failed attempts of the tasks retained: each attempt
// retried, and each dead task's last.
func (t *tally) failed() int64 { return t.attempts + t.states[stateDead] }

// add counts n more tasks (n < 0: fewer) of meta m.
func (t *tally) add(m meta, n int64) {
	t.states[m.state] += n
	if !onceq.TaskStates[m.state].Final() {
		t.prio[m.prio] += n
	}
}

// byState is t's counts by state, the states of none left out.
func (t *tally) byState() map[onceq.TaskState]int64 {
	out := map[onceq.TaskState]int64{}
	for i, s := range onceq.TaskStates {
		if t.states[i] > 0 {
			out[s] = t.states[i]
		}
	}
	return out
}

// byPriority is t's unfinished tasks by priority, the priorities of none
// left out.
func (t *tally) byPriority() map[int]int64 {
	out := map[int]int64{}
	for p, n := range t.prio {
		if n > 0 {
			out[p] = n
		}
	}
	return out
}

// merge adds o's counts to t's.
func (t *tally) merge(o *tally) {
	for i, n := range o.states {
		t.states[i] += n
	}
	t.attempts += o.attempts
	for i, n := range o.prio {
		t.prio[i] += n
	}
}

// dueOf is when a record's task is due, in unix ms, if it waits for a
// time (scheduled or retrying); else 0.
func dueOf(r *onceq.TaskRecord) int64 {
	if (r.State == onceq.StateScheduled || r.State == onceq.StateRetrying) && !r.Due.IsZero() {
		return max(r.Due.UnixMilli(), 1)
	}
	return 0
}

// The indexes of onceq.StateRunning and onceq.StateDead.
var stateRunning, stateDead = stateIndex(onceq.StateRunning), stateIndex(onceq.StateDead)

func stateIndex(s onceq.TaskState) byte {
	for i, st := range onceq.TaskStates {
		if st == s {
			return byte(i)
		}
	}
	return 0
}

func recordKey(queue, id string) []byte {
	k := make([]byte, 0, 2+len(queue)+len(id))
	k = append(append(append(k, prefixRecord), queue...), 0)
	return append(k, id...)
}

func queuePrefix(p byte, queue string) []byte {
	return append(append([]byte{p}, queue...), 0)
}

func indexPrefix(queue string, state byte) []byte {
	return append(queuePrefix(prefixIndex, queue), state)
}

func indexKey(queue string, m meta, id string) []byte {
	k := indexPrefix(queue, m.state)
	k = binary.BigEndian.AppendUint64(k, uint64(m.last))
	return append(k, id...)
}

// attemptPrefix is the start of the keys of a task's failed attempts.
func attemptPrefix(queue, id string) []byte {
	return append(append(queuePrefix(prefixAttempt, queue), id...), 0)
}

func attemptKey(queue, id string, attempt int) []byte {
	return binary.BigEndian.AppendUint32(attemptPrefix(queue, id), uint32(attempt))
}

func dueKey(queue string, due int64, id string) []byte {
	k := binary.BigEndian.AppendUint64(queuePrefix(prefixDue, queue), uint64(due))
	return append(k, id...)
}

// indexID returns the time and ID of an index key of queue and state.
func indexID(k []byte, prefixLen int) (int64, string) {
	return int64(binary.BigEndian.Uint64(k[prefixLen : prefixLen+8])), string(k[prefixLen+8:])
}

func topicIDKey(topic string) []byte { return queuePrefix(prefixTopicID, topic) }

func offsetKey(topic string, partition int32) []byte {
	return binary.BigEndian.AppendUint32(queuePrefix(prefixOffset, topic), uint32(partition))
}

// prefixEnd is the first key after every key that starts with p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// lastTime is when a record's transition happened as far as it tells:
// its finish, else its start, else its enqueue time; else at, the time
// the record was written.
func lastTime(r *onceq.TaskRecord, at time.Time) int64 {
	if t := transitionTime(*r); !t.IsZero() {
		return t.UnixMilli()
	}
	return at.UnixMilli()
}

// A cursor is where a page ended: the last task's time and ID,
// "<unix ms>.<id>". Pages run newest first.
type cursor struct {
	last int64
	id   string
}

func (c cursor) String() string { return strconv.FormatInt(c.last, 10) + "." + c.id }

// parseCursor reads Page.Next.
func parseCursor(s string) (cursor, error) {
	ms, id, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || n < 0 || ms != strconv.FormatInt(n, 10) || onceq.ValidateID(id) != nil {
		return cursor{}, errors.New("inspect: page cursor " + strconv.Quote(s) + " is not one a page returned: pass Page.Next as it is, or \"\" for the first page")
	}
	return cursor{n, id}, nil
}

// before reports whether (last, id) comes after c in a newest-first page.
func (c cursor) before(last int64, id string) bool {
	return last < c.last || last == c.last && id < c.id
}

// checkFormat empties a stored view of another format than viewFormat,
// which is then read again from the records topics, and notes the format.
func checkFormat(db *pebble.DB) error {
	v, closer, err := db.Get([]byte{keyFormat})
	switch {
	case err == nil:
		ok := len(v) == 1 && v[0] == viewFormat
		closer.Close()
		if ok {
			return nil
		}
	case !errors.Is(err, pebble.ErrNotFound):
		return err
	}
	// Every key starts with a prefix byte below 0xff. The view has no
	// WAL: the flush makes both writes durable before any other.
	if err := db.DeleteRange([]byte{0}, []byte{0xff}, pebble.NoSync); err != nil {
		return fmt.Errorf("emptying a view of an older format: %w", err)
	}
	if err := db.Set([]byte{keyFormat}, []byte{viewFormat}, pebble.NoSync); err != nil {
		return err
	}
	return db.Flush()
}
