package embedded

import (
	"cmp"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Restoring the idempotent producers' sequences of a killed embedded broker.
//
// A Kafka broker that starts after a crash rebuilds every producer's state
// from its log: per partition, the producer's epoch, the sequence it
// expects next and the last five batches it appended. A producer that
// retries a batch the broker appended but never acknowledged then gets
// the original offset back, not a second copy. The embedded broker saves
// these windows only when it stops cleanly (seq_windows.json). Killed, it
// starts with the windows of its last clean stop, or none, and accepts
// the retry as new: the records are in the log twice. Tasks whose IDs
// onceq generated are not looked up by workers (the producer's
// idempotence is what keeps them single), so those duplicates would run.
//
// restoreSequences does the broker's part of log recovery: it writes, for
// every producer and partition whose batches the log holds, the window
// the broker would have had, replayed from those batches as the broker
// builds it on append. Windows of producers the log no longer holds are
// kept as the file had them.

// seqFile is seq_windows.json. Windows holds each window as the file had
// it, so that the ones recovery does not rebuild are written back
// unchanged.
type seqFile struct {
	Version int               `json:"version"`
	Windows []json.RawMessage `json:"windows"`
}

// seqWindow is one producer's window in one partition, in the broker's
// form.
type seqWindow struct {
	PID     int64       `json:"pid"`
	Topic   string      `json:"topic"`
	Part    int32       `json:"partition"`
	Entries [5]seqEntry `json:"entries"`
	Count   uint8       `json:"count"`
	At      uint8       `json:"at"` // the next entry to write
	Epoch   int16       `json:"epoch"`
	Seen    bool        `json:"seen"`
	NextSeq int32       `json:"next_seq"`
}

// seqEntry is one appended batch: its sequences and its base offset.
type seqEntry struct {
	FirstSeq int32 `json:"first_seq"`
	NextSeq  int32 `json:"next_seq"`
	Offset   int64 `json:"offset"`
}

// windowKey names a window.
type windowKey struct {
	pid   int64
	topic string
	part  int32
}

// sequenced notes a data batch of an idempotent producer in the
// partition's windows, as the broker does when it appends it.
func (pl *partLog) sequenced(b kmsg.RecordBatch) {
	if b.ProducerID < 0 || b.FirstSequence < 0 {
		return
	}
	if pl.seqs == nil {
		pl.seqs = map[int64]*seqWindow{}
	}
	w := pl.seqs[b.ProducerID]
	if w == nil {
		w = &seqWindow{PID: b.ProducerID, Topic: pl.topic, Part: pl.part}
		pl.seqs[b.ProducerID] = w
	}
	next := int32((int64(b.FirstSequence) + int64(b.NumRecords)) % math.MaxInt32)
	e := seqEntry{FirstSeq: b.FirstSequence, NextSeq: next, Offset: b.FirstOffset}
	if !w.Seen || b.ProducerEpoch != w.Epoch {
		// A new epoch starts its sequences over, and the window with it.
		*w = seqWindow{PID: w.PID, Topic: w.Topic, Part: w.Part, Entries: [5]seqEntry{e}, Count: 1, At: 1, Epoch: b.ProducerEpoch, Seen: true, NextSeq: next}
		return
	}
	w.Entries[w.At] = e
	w.At = (w.At + 1) % 5
	w.Count = min(w.Count+1, 5)
	w.NextSeq = next
}

// restoreSequences writes the windows of logs into dir's seq_windows.json
// and returns how many it changed there: 0 when the file already held
// them (a clean stop, or a recovery run before).
func restoreSequences(dir string, logs []*partLog) (int, error) {
	rebuilt := map[windowKey]*seqWindow{}
	for _, pl := range logs {
		for _, w := range pl.seqs {
			rebuilt[windowKey{w.PID, w.Topic, w.Part}] = w
		}
	}
	if len(rebuilt) == 0 {
		return 0, nil
	}
	path := filepath.Join(dir, "seq_windows.json")
	old := seqFile{Version: persistVersion}
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return 0, err
	default:
		// An unreadable file is one the broker could not load either:
		// what the log holds replaces it.
		if json.Unmarshal(raw, &old) != nil {
			old = seqFile{Version: persistVersion}
		}
	}
	out := seqFile{Version: persistVersion}
	changed := 0
	for _, r := range old.Windows {
		var w seqWindow
		if json.Unmarshal(r, &w) != nil {
			out.Windows = append(out.Windows, r)
			continue
		}
		k := windowKey{w.PID, w.Topic, w.Part}
		nw, ok := rebuilt[k]
		if !ok {
			out.Windows = append(out.Windows, r)
			continue
		}
		delete(rebuilt, k)
		enc, err := json.Marshal(nw)
		if err != nil {
			return 0, err
		}
		if w != *nw {
			changed++
		}
		out.Windows = append(out.Windows, enc)
	}
	keys := make([]windowKey, 0, len(rebuilt))
	for k := range rebuilt {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b windowKey) int {
		return cmp.Or(cmp.Compare(a.pid, b.pid), strings.Compare(a.topic, b.topic), cmp.Compare(a.part, b.part))
	})
	for _, k := range keys {
		enc, err := json.Marshal(rebuilt[k])
		if err != nil {
			return 0, err
		}
		out.Windows = append(out.Windows, enc)
		changed++
	}
	if changed == 0 {
		return 0, nil
	}
	enc, err := json.Marshal(out)
	if err != nil {
		return 0, err
	}
	tmp := path + ".tmp"
	if err := writeSynced(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, enc); err != nil {
		return 0, err
	}
	return changed, os.Rename(tmp, path)
}
