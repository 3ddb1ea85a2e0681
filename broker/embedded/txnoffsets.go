package embedded

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The offsets of a transaction the embedded broker was committing when it
// was killed.
//
// A Kafka coordinator writes a transaction's offsets to __consumer_offsets
// as transactional records, and the commit marker there makes them visible
// with the transaction's other writes. The embedded broker (kfake) keeps a
// transaction's offsets in memory until its EndTxn, which writes the
// commit marker to each partition first and only then applies the offsets
// to the group, appending them to groups.log. Killed in between, the
// broker restarts with the transaction's records committed (or committed
// by recoverOpenTxns when some markers are missing) and the group's
// offsets behind them: a worker runs those tasks again.
//
// So the broker notes, just before kfake handles an EndTxn that commits,
// the offsets that transaction commits, in txnOffsetsFile, and clears the
// note before the next request that may move a group's offsets (by then
// the EndTxn has been handled whole: kfake handles requests one at a
// time). The recovery of a killed broker applies a note it finds to
// groups.log when the transaction holds a commit marker, and drops it
// otherwise (the kill came before the commit was decided, and the
// transaction is aborted).

// txnOffsetsFile is the note, in the data dir.
const txnOffsetsFile = "onceq-txn-offsets"

// txnNote is the offsets one transaction commits.
type txnNote struct {
	PID     int64       `json:"pid"`
	Epoch   int16       `json:"epoch"`
	Offsets []txnOffset `json:"offsets"`
}

// txnOffset is one offset of a TxnOffsetCommit.
type txnOffset struct {
	Group       string  `json:"group"`
	Topic       string  `json:"topic"`
	Partition   int32   `json:"partition"`
	Offset      int64   `json:"offset"`
	LeaderEpoch int32   `json:"leader_epoch"`
	Metadata    *string `json:"metadata,omitempty"`
}

// txnNotes collects the offsets of the open transactions from their
// TxnOffsetCommits and writes the note of each commit.
type txnNotes struct {
	mu      sync.Mutex
	path    string
	sync    bool
	log     *slog.Logger
	pending map[int64]*txnNote // producer ID -> its open transaction's offsets
	noted   bool               // the file holds a note
	// topicName names a topic ID: TxnOffsetCommit from version 6 carries
	// IDs only.
	topicName func(id [16]byte) string
}

// installTxnNotes makes c note the offsets of each transaction it commits
// in dir (see above).
func installTxnNotes(c *kfake.Cluster, dir string, syncWrites bool, log *slog.Logger) {
	n := &txnNotes{path: filepath.Join(dir, txnOffsetsFile), sync: syncWrites, log: log, pending: map[int64]*txnNote{},
		topicName: func(id [16]byte) string {
			// From a control function: kfake runs admin calls meanwhile.
			if i := c.TopicIDInfo(id); i != nil {
				return i.Topic
			}
			return ""
		}}
	c.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		n.see(req)
		return nil, nil, false
	})
}

// see takes note of one request before kfake handles it.
func (n *txnNotes) see(req kmsg.Request) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch r := req.(type) {
	case *kmsg.TxnOffsetCommitRequest:
		n.clear()
		p := n.pending[r.ProducerID]
		if p == nil || p.Epoch != r.ProducerEpoch {
			p = &txnNote{PID: r.ProducerID, Epoch: r.ProducerEpoch}
			n.pending[r.ProducerID] = p
		}
		for _, t := range r.Topics {
			topic := t.Topic
			if topic == "" {
				topic = n.topicName(t.TopicID)
			}
			if topic == "" {
				continue // kfake refuses it: unknown topic
			}
			for _, part := range t.Partitions {
				p.Offsets = append(p.Offsets, txnOffset{Group: r.Group, Topic: topic, Partition: part.Partition,
					Offset: part.Offset, LeaderEpoch: part.LeaderEpoch, Metadata: part.Metadata})
			}
		}
	case *kmsg.EndTxnRequest:
		n.clear()
		p := n.pending[r.ProducerID]
		delete(n.pending, r.ProducerID)
		if r.Commit && p != nil && p.Epoch == r.ProducerEpoch && len(p.Offsets) > 0 {
			n.write(p)
		}
	case *kmsg.InitProducerIDRequest:
		// A transaction the new epoch aborts commits nothing; its
		// producer's next TxnOffsetCommit starts over anyway.
		if r.ProducerID >= 0 {
			delete(n.pending, r.ProducerID)
		}
	case *kmsg.OffsetCommitRequest, *kmsg.OffsetDeleteRequest, *kmsg.DeleteGroupsRequest,
		*kmsg.DeleteTopicsRequest, *kmsg.DeleteRecordsRequest:
		// It may move an offset the note holds: once it is handled,
		// applying the note again would move the offset back.
		n.clear()
	}
}

// write replaces the file's note with p.
func (n *txnNotes) write(p *txnNote) {
	body, err := json.Marshal(p)
	if err == nil {
		err = writeFileAt(n.path, appendFramed(nil, body), n.sync)
	}
	if err != nil {
		n.warn("noting the offsets of a transaction before its commit", err)
		return
	}
	n.noted = true
}

// clear empties the file, if it holds a note.
func (n *txnNotes) clear() {
	if !n.noted {
		return
	}
	if err := os.Truncate(n.path, 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
		n.warn("clearing the note of a committed transaction's offsets", err)
		return
	}
	n.noted = false
}

func (n *txnNotes) warn(what string, err error) {
	if n.log != nil {
		n.log.Warn("broker: "+what+": a kill before the commit ends may leave the group's offsets behind it", "err", err)
	}
}

// writeFileAt replaces path's content with data, syncing it if sync.
func writeFileAt(path string, data []byte, sync bool) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

// readTxnNote reads the note of dir; nil if there is none, or only part of
// one (the kill came while it was written, before kfake saw the EndTxn).
func readTxnNote(dir string) (*txnNote, error) {
	raw, err := os.ReadFile(filepath.Join(dir, txnOffsetsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(raw) < 10 {
		return nil, nil
	}
	length := int(binary.LittleEndian.Uint32(raw[0:4]))
	if length < 2 || 8+length > len(raw) {
		return nil, nil
	}
	if crc32.Checksum(raw[8:8+length], castagnoli) != binary.LittleEndian.Uint32(raw[4:8]) {
		return nil, nil
	}
	var p txnNote
	if err := json.Unmarshal(raw[10:8+length], &p); err != nil {
		return nil, nil
	}
	return &p, nil
}

// restoreTxnOffsets applies the note of dir to its groups.log when the
// transaction it names committed (committed, from the partitions'
// markers, and not ambiguous: see recoverOpenTxns), and removes the note.
// It returns how many offsets it applied. Applying a note the broker had
// applied before its kill writes the same offsets again.
func restoreTxnOffsets(dir string, committed, ambiguous map[txnKey]bool) (int, error) {
	p, err := readTxnNote(dir)
	if err != nil || p == nil {
		return 0, err
	}
	k := txnKey{p.PID, p.Epoch}
	n := 0
	if committed[k] && !ambiguous[k] {
		now := time.Now().UnixMilli()
		var out []byte
		for _, o := range p.Offsets {
			body, err := json.Marshal(groupCommitEntry{Type: "commit", Group: o.Group, Topic: o.Topic, Part: o.Partition,
				Offset: o.Offset, Epoch: o.LeaderEpoch, Metadata: o.Metadata, LastCommit: &now})
			if err != nil {
				return 0, err
			}
			out = appendFramed(out, body)
		}
		if err := appendSync(filepath.Join(dir, "groups.log"), out); err != nil {
			return 0, fmt.Errorf("groups.log: %w", err)
		}
		n = len(p.Offsets)
	}
	return n, clearTxnNote(dir)
}

// clearTxnNote removes dir's note: at the start, after recovery, and at a
// clean stop, every transaction it could name has ended.
func clearTxnNote(dir string) error {
	err := os.Remove(filepath.Join(dir, txnOffsetsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// groupCommitEntry is a commit entry of kfake's groups.log.
type groupCommitEntry struct {
	Type       string  `json:"type"`
	Group      string  `json:"g"`
	Topic      string  `json:"t,omitempty"`
	Part       int32   `json:"p,omitempty"`
	Offset     int64   `json:"o,omitempty"`
	Epoch      int32   `json:"e,omitempty"`
	Metadata   *string `json:"m,omitempty"`
	LastCommit *int64  `json:"lc,omitempty"`
}
