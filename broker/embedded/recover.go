package embedded

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Completing the transactions a killed embedded broker left open.
//
// A Kafka transaction coordinator that fails over finishes every open
// transaction before it serves again: it writes a commit marker to each
// partition of a transaction whose commit was decided, an abort marker to
// each partition of any other, and bumps the producer's epoch so the old
// producer is fenced. The embedded broker (kfake) recovering from a crash
// instead treats a transaction with data but no marker as aborted in
// memory only, and writes no marker. Two faults follow:
//
//   - a read_committed consumer told "producer P aborted from offset a"
//     drops P's batches until it meets a marker of P, so the next
//     transaction P commits in that partition is dropped too: lost;
//   - after a second crash, the replay attributes the unmarked records to
//     the next marker of P, and a commit marker makes them visible: the
//     aborted records come back as duplicates.
//
// A transaction can also be cut in the middle of its commit: markers are
// written partition by partition, so some partitions hold the commit
// marker and others none.
//
// recoverOpenTxns does the coordinator's part on the data dir before the
// broker loads it. It reads each partition's log, finds the producers
// with data after their last marker, and appends the missing marker:
// commit when some partition holds a commit marker of the same producer
// and epoch (the commit was decided; under KIP-890 every transaction has
// its own epoch, so the pair names one transaction), abort otherwise. A
// producer older than KIP-890 part 2 runs several transactions on one
// epoch, which shows as data or a second marker after a marker of the same
// epoch in a partition: the pair names no transaction then, and its open
// transactions are aborted. It then records an epoch bump for each of
// those producers in the broker's producer log, so a client still holding
// the old epoch is fenced instead of going on with a transaction that is
// gone.
//
// The same pass restores the idempotent producers' sequence windows
// (restoreSequences, recover_seq.go), which a Kafka broker rebuilds from
// its log and the embedded broker would otherwise lose with the process,
// and applies the group offsets of a transaction whose commit the kill cut
// after its markers (restoreTxnOffsets, txnoffsets.go).
//
// It writes the broker's own on-disk formats: segment files of Kafka
// RecordBatches, their 15-byte index entries, and the framed JSON entries
// of pids.log. TestKilledBrokerFinishesOpenTransactions and
// TestRecoverCompletesTornCommitOnTheBroker run them through the broker.

const (
	persistVersion  = 1  // kfake's currentPersistVersion
	indexEntrySize  = 15 // version, checksum, leader epoch, max timestamp, flags
	attrTransaction = 0x10
	attrControl     = 0x20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// txnKey names one transaction: a producer ID and its epoch.
type txnKey struct {
	pid   int64
	epoch int16
}

// txnEnd is how recovery ended a producer's open transaction.
type txnEnd struct {
	epoch  int16
	commit bool
}

// partLog is what recovery learns of one partition's log.
type partLog struct {
	topic       string
	part        int32
	dir         string
	lastBase    int64 // base offset of the last segment, -1 if none
	next        int64 // offset the next batch gets
	leaderEpoch int32
	open        map[int64]int16      // producer ID -> epoch of its unmarked data
	marked      map[txnKey]bool      // transactions with a marker here
	seqs        map[int64]*seqWindow // producer ID -> its sequence window
}

// recovery reports what recoverOpenTxns did.
type recovery struct {
	Committed int // partition markers written for decided commits
	Aborted   int // partition markers written for open transactions
	Producers int // producers fenced by an epoch bump
	Sequences int // producer sequence windows restored (restoreSequences)
	Offsets   int // group offsets of a cut commit applied (restoreTxnOffsets)
}

// recoverOpenTxns completes the open transactions of the broker data dir
// dir. It is safe to run on a dir the broker left cleanly (it then finds
// nothing to do, or aborts transactions the broker would have resumed,
// which Kafka allows at any time) and to run again after it was itself
// interrupted.
func recoverOpenTxns(dir string) (recovery, error) {
	var rec recovery
	entries, err := os.ReadDir(filepath.Join(dir, "partitions"))
	if errors.Is(err, fs.ErrNotExist) {
		return rec, nil
	}
	if err != nil {
		return rec, err
	}
	var logs, sequenced []*partLog
	committed := map[txnKey]bool{} // transactions with a commit marker
	ambiguous := map[txnKey]bool{} // epochs that carried several transactions
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		pl, ok := parsePartDir(dir, e.Name())
		if !ok {
			continue
		}
		if err := pl.scan(committed, ambiguous); err != nil {
			return rec, fmt.Errorf("partition %s-%d: %w", pl.topic, pl.part, err)
		}
		if len(pl.open) > 0 {
			logs = append(logs, pl)
		}
		if len(pl.seqs) > 0 {
			sequenced = append(sequenced, pl)
		}
	}
	ends := map[int64]txnEnd{} // producer ID -> the transaction to fence it past
	for _, pl := range logs {
		for _, pid := range slices.Sorted(maps.Keys(pl.open)) {
			k := txnKey{pid, pl.open[pid]}
			commit := committed[k] && !ambiguous[k]
			if err := pl.appendMarker(k, commit); err != nil {
				return rec, fmt.Errorf("partition %s-%d: writing marker: %w", pl.topic, pl.part, err)
			}
			if commit {
				rec.Committed++
			} else {
				rec.Aborted++
			}
			if e, ok := ends[pid]; !ok || k.epoch >= e.epoch {
				ends[pid] = txnEnd{k.epoch, commit}
			}
		}
	}
	if len(ends) > 0 {
		if err := fenceProducers(dir, ends); err != nil {
			return rec, fmt.Errorf("pids.log: %w", err)
		}
		rec.Producers = len(ends)
	}
	if rec.Sequences, err = restoreSequences(dir, sequenced); err != nil {
		return rec, fmt.Errorf("seq_windows.json: %w", err)
	}
	if rec.Offsets, err = restoreTxnOffsets(dir, committed, ambiguous); err != nil {
		return rec, fmt.Errorf("the offsets of the transaction being committed: %w", err)
	}
	return rec, nil
}

// parsePartDir reads "<escaped topic>-<partition>".
func parsePartDir(dir, name string) (*partLog, bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return nil, false
	}
	part, err := strconv.ParseInt(name[i+1:], 10, 32)
	if err != nil {
		return nil, false
	}
	topic, err := url.PathUnescape(name[:i])
	if err != nil {
		return nil, false
	}
	return &partLog{
		topic:    topic,
		part:     int32(part),
		dir:      filepath.Join(dir, "partitions", name),
		lastBase: -1,
		open:     map[int64]int16{},
		marked:   map[txnKey]bool{},
	}, true
}

// scan reads the partition's segments in order, truncates what the broker
// would truncate on load (a torn batch at a segment's end, index entries
// without a batch), adds index entries for batches that lack one, and
// notes the producers with unmarked data and the commit markers.
func (pl *partLog) scan(committed, ambiguous map[txnKey]bool) error {
	entries, err := os.ReadDir(pl.dir)
	if err != nil {
		return err
	}
	var bases []int64
	for _, e := range entries {
		if b, ok := strings.CutSuffix(e.Name(), ".dat"); ok {
			if base, err := strconv.ParseInt(b, 10, 64); err == nil {
				bases = append(bases, base)
			}
		}
	}
	slices.Sort(bases)
	for _, base := range bases {
		if err := pl.scanSegment(base, committed, ambiguous); err != nil {
			return err
		}
	}
	return nil
}

func (pl *partLog) segPath(base int64) string {
	return filepath.Join(pl.dir, strconv.FormatInt(base, 10)+".dat")
}

func (pl *partLog) idxPath(base int64) string {
	return filepath.Join(pl.dir, strconv.FormatInt(base, 10)+".idx")
}

func (pl *partLog) scanSegment(base int64, committed, ambiguous map[txnKey]bool) error {
	raw, err := os.ReadFile(pl.segPath(base))
	if err != nil {
		return err
	}
	idx, err := os.ReadFile(pl.idxPath(base))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var missing []byte // index entries to add for batches beyond the index
	pos, n := 0, 0
	for {
		b, size, ok := readBatch(raw[pos:])
		if !ok {
			break
		}
		txnal := b.Attributes&attrTransaction != 0
		control := b.Attributes&attrControl != 0
		if off := n * indexEntrySize; off+indexEntrySize <= len(idx) {
			pl.leaderEpoch = int32(binary.LittleEndian.Uint32(idx[off+2 : off+6]))
		} else {
			e := indexEntry(pl.leaderEpoch, txnal && !control)
			missing = append(missing, e[:]...)
		}
		switch {
		case control:
			k := txnKey{b.ProducerID, b.ProducerEpoch}
			delete(pl.open, k.pid)
			ambiguous[k] = ambiguous[k] || pl.marked[k]
			pl.marked[k] = true
			if isCommitMarker(b) {
				committed[k] = true
			}
		case txnal:
			k := txnKey{b.ProducerID, b.ProducerEpoch}
			ambiguous[k] = ambiguous[k] || pl.marked[k] // data after its own marker
			pl.open[k.pid] = k.epoch
		}
		if !control {
			pl.sequenced(b)
		}
		pl.next = b.FirstOffset + int64(b.LastOffsetDelta) + 1
		pos += size
		n++
	}
	pl.lastBase = base
	if pos < len(raw) {
		if err := os.Truncate(pl.segPath(base), int64(pos)); err != nil {
			return err
		}
	}
	switch want := n * indexEntrySize; {
	case len(idx) > want:
		return os.Truncate(pl.idxPath(base), int64(want))
	case len(missing) > 0:
		return appendSync(pl.idxPath(base), missing)
	}
	return nil
}

// readBatch decodes the RecordBatch at the start of raw, checking its CRC
// the way the broker does on load. ok is false at the end of the valid
// data.
func readBatch(raw []byte) (b kmsg.RecordBatch, size int, ok bool) {
	if len(raw) < 21 {
		return b, 0, false
	}
	length := int64(binary.BigEndian.Uint32(raw[8:12]))
	if length < 49 || length > 1<<30 || 12+length > int64(len(raw)) { // 49: the header after the length
		return b, 0, false
	}
	size = 12 + int(length)
	if binary.BigEndian.Uint32(raw[17:21]) != crc32.Checksum(raw[21:size], castagnoli) {
		return b, 0, false
	}
	if err := b.ReadFrom(raw[:size]); err != nil {
		return b, 0, false
	}
	return b, size, true
}

// isCommitMarker reads a control batch's key; an unreadable one counts as
// an abort, as the broker counts it.
func isCommitMarker(b kmsg.RecordBatch) bool {
	var r kmsg.Record
	if err := r.ReadFrom(b.Records); err != nil || len(r.Key) < 4 {
		return false
	}
	return binary.BigEndian.Uint16(r.Key[2:4]) == uint16(kmsg.ControlRecordKeyTypeCommit)
}

func indexEntry(leaderEpoch int32, inTx bool) [indexEntrySize]byte {
	var e [indexEntrySize]byte
	e[0] = persistVersion
	binary.LittleEndian.PutUint32(e[2:6], uint32(leaderEpoch))
	if inTx {
		e[14] = 1
	}
	e[1] = byte(crc32.Checksum(e[2:], castagnoli))
	return e
}

// appendMarker writes the transaction marker at the end of the partition's
// last segment, and its index entry.
func (pl *partLog) appendMarker(k txnKey, commit bool) error {
	if pl.lastBase < 0 {
		return errors.New("no segment to append to")
	}
	enc := encodeBatch(markerBatch(k, commit, pl.next, time.Now()))
	if err := appendSync(pl.segPath(pl.lastBase), enc); err != nil {
		return err
	}
	e := indexEntry(pl.leaderEpoch, false)
	if err := appendSync(pl.idxPath(pl.lastBase), e[:]); err != nil {
		return err
	}
	pl.next++
	delete(pl.open, k.pid)
	return nil
}

// markerBatch is the control batch ending transaction k at offset, as the
// broker writes it.
func markerBatch(k txnKey, commit bool, offset int64, now time.Time) kmsg.RecordBatch {
	typ := kmsg.ControlRecordKeyTypeAbort
	if commit {
		typ = kmsg.ControlRecordKeyTypeCommit
	}
	key := kmsg.ControlRecordKey{Type: typ}
	val := kmsg.EndTxnMarker{}
	r := kmsg.Record{Key: key.AppendTo(nil), Value: val.AppendTo(nil)}
	r.Length = int32(len(r.AppendTo(nil)) - 1) // a one-byte varint length
	return kmsg.RecordBatch{
		FirstOffset:          offset,
		PartitionLeaderEpoch: -1,
		Magic:                2,
		Attributes:           attrControl | attrTransaction,
		FirstTimestamp:       now.UnixMilli(),
		MaxTimestamp:         now.UnixMilli(),
		ProducerID:           k.pid,
		ProducerEpoch:        k.epoch,
		FirstSequence:        -1,
		NumRecords:           1,
		Records:              r.AppendTo(nil),
	}
}

// encodeBatch is b's wire form with its length and CRC filled in.
func encodeBatch(b kmsg.RecordBatch) []byte {
	enc := b.AppendTo(nil)
	binary.BigEndian.PutUint32(enc[8:12], uint32(len(enc)-12))
	binary.BigEndian.PutUint32(enc[17:21], crc32.Checksum(enc[21:], castagnoli))
	return enc
}

func appendSync(path string, data []byte) error {
	return writeSynced(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, data)
}

// writeSynced opens path with flag, writes data, syncs and closes it.
func writeSynced(path string, flag int, data []byte) error {
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// pidEntry is one entry of the broker's producer log.
type pidEntry struct {
	Type    string `json:"type"`
	PID     int64  `json:"pid"`
	Epoch   int16  `json:"epoch"`
	TxID    string `json:"txid,omitempty"`
	Timeout int32  `json:"timeout,omitempty"`
	Commit  *bool  `json:"commit,omitempty"`
}

// fenceProducers appends to pids.log, for each producer, the end of its
// transaction with an epoch above both the transaction's and the log's, as
// the broker logs an EndTxn that bumps the epoch.
func fenceProducers(dir string, ends map[int64]txnEnd) error {
	path := filepath.Join(dir, "pids.log")
	raw, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	epochs := map[int64]int16{}
	valid := 0
	for valid+10 <= len(raw) {
		length := int(binary.LittleEndian.Uint32(raw[valid : valid+4]))
		if length < 2 || valid+8+length > len(raw) {
			break
		}
		body := raw[valid+8 : valid+8+length]
		if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(raw[valid+4:valid+8]) {
			break
		}
		var e pidEntry
		if json.Unmarshal(body[2:], &e) == nil {
			epochs[e.PID] = e.Epoch
		}
		valid += 8 + length
	}
	if valid < len(raw) {
		if err := os.Truncate(path, int64(valid)); err != nil {
			return err
		}
	}
	var out []byte
	for _, pid := range slices.Sorted(maps.Keys(ends)) {
		epoch := max(ends[pid].epoch, epochs[pid])
		if epoch == 1<<15-1 {
			continue // exhausted: the client must get a new producer ID anyway
		}
		commit := ends[pid].commit
		body, err := json.Marshal(pidEntry{Type: "endtx", PID: pid, Epoch: epoch + 1, Commit: &commit})
		if err != nil {
			return err
		}
		out = appendFramed(out, body)
	}
	return appendSync(path, out)
}

// appendFramed frames body as [length][crc32c][version][body], little-endian.
func appendFramed(dst, body []byte) []byte {
	var h [10]byte
	binary.LittleEndian.PutUint32(h[0:4], uint32(2+len(body)))
	binary.LittleEndian.PutUint16(h[8:10], persistVersion)
	crc := crc32.Update(crc32.Checksum(h[8:10], castagnoli), castagnoli, body)
	binary.LittleEndian.PutUint32(h[4:8], crc)
	dst = append(dst, h[:]...)
	return append(dst, body...)
}
