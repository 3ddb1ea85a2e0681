package embedded

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// entry is one batch of a synthetic partition log: "d" data, "c" commit
// marker, "a" abort marker, of producer pid at epoch.
type entry struct {
	kind  string
	pid   int64
	epoch int16
}

// writeLog writes a partition log of the given batches, with an index.
func writeLog(t testing.TB, dir, topic string, part int, tail []byte, batches ...entry) {
	t.Helper()
	pdir := filepath.Join(dir, "partitions", topic+"-"+string(rune('0'+part)))
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	var seg, idx []byte
	seqs := map[txnKey]int32{} // each producer's sequences, per epoch
	for off, b := range batches {
		var rb kmsg.RecordBatch
		if b.kind == "d" {
			r := kmsg.Record{Value: []byte("v")}
			r.Length = int32(len(r.AppendTo(nil)) - 1)
			k := txnKey{b.pid, b.epoch}
			rb = kmsg.RecordBatch{FirstOffset: int64(off), Magic: 2, Attributes: attrTransaction,
				ProducerID: b.pid, ProducerEpoch: b.epoch, FirstSequence: seqs[k], NumRecords: 1, Records: r.AppendTo(nil)}
			seqs[k]++
		} else {
			rb = markerBatch(txnKey{b.pid, b.epoch}, b.kind == "c", int64(off), time.Now())
		}
		seg = append(seg, encodeBatch(rb)...)
		e := indexEntry(0, b.kind == "d")
		idx = append(idx, e[:]...)
	}
	seg = append(seg, tail...)
	if err := os.WriteFile(filepath.Join(pdir, "0.dat"), seg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pdir, "0.idx"), idx, 0o644); err != nil {
		t.Fatal(err)
	}
}

// readLog reads back a partition log as entries.
func readLog(t testing.TB, dir, name string) []entry {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "partitions", name, "0.dat"))
	if err != nil {
		t.Fatal(err)
	}
	var out []entry
	for len(raw) > 0 {
		b, n, ok := readBatch(raw)
		if !ok {
			t.Fatalf("%s: %d undecodable bytes at the end", name, len(raw))
		}
		kind := "d"
		if b.Attributes&attrControl != 0 {
			kind = "a"
			if isCommitMarker(b) {
				kind = "c"
			}
		}
		out = append(out, entry{kind, b.ProducerID, b.ProducerEpoch})
		raw = raw[n:]
	}
	return out
}

func TestRecoverOpenTxns(t *testing.T) {
	d := func(pid int64, e int16) entry { return entry{"d", pid, e} }
	c := func(pid int64, e int16) entry { return entry{"c", pid, e} }
	a := func(pid int64, e int16) entry { return entry{"a", pid, e} }
	for _, tc := range []struct {
		name       string
		logs       [][]entry // partitions 0, 1, ... of topic "t"
		tail       []byte    // torn bytes after partition 0's last batch
		want       [][]entry
		wantRec    recovery
		wantEpochs map[int64]int16 // epochs logged in pids.log
	}{{
		name:    "whole transactions: only the sequences to restore",
		logs:    [][]entry{{d(1, 0), c(1, 0), d(1, 1), a(1, 1)}, {d(1, 0), c(1, 0)}},
		want:    [][]entry{{d(1, 0), c(1, 0), d(1, 1), a(1, 1)}, {d(1, 0), c(1, 0)}},
		wantRec: recovery{Sequences: 2},
	}, {
		name:       "open transaction: aborted, producer fenced",
		logs:       [][]entry{{d(1, 0), c(1, 0), d(1, 1), d(2, 5)}, {d(1, 1)}},
		want:       [][]entry{{d(1, 0), c(1, 0), d(1, 1), d(2, 5), a(1, 1), a(2, 5)}, {d(1, 1), a(1, 1)}},
		wantRec:    recovery{Aborted: 3, Producers: 2, Sequences: 3},
		wantEpochs: map[int64]int16{1: 2, 2: 6},
	}, {
		name:       "commit cut between partitions: completed",
		logs:       [][]entry{{d(1, 3), c(1, 3)}, {d(1, 3)}},
		want:       [][]entry{{d(1, 3), c(1, 3)}, {d(1, 3), c(1, 3)}},
		wantRec:    recovery{Committed: 1, Producers: 1, Sequences: 2},
		wantEpochs: map[int64]int16{1: 4},
	}, {
		name:       "an epoch that carried two transactions names neither: aborted",
		logs:       [][]entry{{d(1, 0), c(1, 0), d(1, 0), c(1, 0)}, {d(1, 0)}},
		want:       [][]entry{{d(1, 0), c(1, 0), d(1, 0), c(1, 0)}, {d(1, 0), a(1, 0)}},
		wantRec:    recovery{Aborted: 1, Producers: 1, Sequences: 2},
		wantEpochs: map[int64]int16{1: 1},
	}, {
		name:       "data after a marker of its own epoch: aborted everywhere",
		logs:       [][]entry{{d(1, 0), c(1, 0), d(1, 0)}, {d(1, 0)}},
		want:       [][]entry{{d(1, 0), c(1, 0), d(1, 0), a(1, 0)}, {d(1, 0), a(1, 0)}},
		wantRec:    recovery{Aborted: 2, Producers: 1, Sequences: 2},
		wantEpochs: map[int64]int16{1: 1},
	}, {
		name:       "torn batch at the end: truncated first",
		logs:       [][]entry{{d(1, 0)}},
		tail:       []byte{0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 40, 1, 2, 3},
		want:       [][]entry{{d(1, 0), a(1, 0)}},
		wantRec:    recovery{Aborted: 1, Producers: 1, Sequences: 1},
		wantEpochs: map[int64]int16{1: 1},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for p, l := range tc.logs {
				var tail []byte
				if p == 0 {
					tail = tc.tail
				}
				writeLog(t, dir, "t", p, tail, l...)
			}
			rec, err := recoverOpenTxns(dir)
			if err != nil {
				t.Fatal(err)
			}
			if rec != tc.wantRec {
				t.Errorf("recovery %+v, want %+v", rec, tc.wantRec)
			}
			for p, want := range tc.want {
				name := "t-" + string(rune('0'+p))
				if got := readLog(t, dir, name); !slices.Equal(got, want) {
					t.Errorf("%s: %v, want %v", name, got, want)
				}
				idx, _ := os.ReadFile(filepath.Join(dir, "partitions", name, "0.idx"))
				if len(idx) != len(want)*indexEntrySize {
					t.Errorf("%s: %d index bytes for %d batches", name, len(idx), len(want))
				}
			}
			if got := loggedEpochs(t, dir); len(tc.wantEpochs) > 0 || len(got) > 0 {
				if !mapsEqual(got, tc.wantEpochs) {
					t.Errorf("pids.log epochs %v, want %v", got, tc.wantEpochs)
				}
			}
			if again, err := recoverOpenTxns(dir); err != nil || again != (recovery{}) {
				t.Errorf("a second recovery did %+v (%v), want nothing", again, err)
			}
		})
	}
}

func mapsEqual(a, b map[int64]int16) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// loggedEpochs reads pids.log the way the broker does: the last entry per
// producer wins.
func loggedEpochs(t testing.TB, dir string) map[int64]int16 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "pids.log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]int16{}
	for len(raw) >= 10 {
		n := int(binary.LittleEndian.Uint32(raw))
		var e pidEntry
		if err := json.Unmarshal(raw[10:8+n], &e); err != nil {
			t.Fatal(err)
		}
		if e.Type != "endtx" || e.Commit == nil {
			t.Errorf("pids.log entry %+v: want an endtx with its outcome", e)
		}
		out[e.PID] = e.Epoch
		raw = raw[8+n:]
	}
	return out
}

// FuzzRecoverOpenTxns runs recovery on arbitrary segment, index and
// producer log bytes: it never panics, and what it leaves needs no second
// recovery.
func FuzzRecoverOpenTxns(f *testing.F) {
	seed := t2dir(f, []entry{{"d", 1, 0}, {"c", 1, 0}, {"d", 1, 1}})
	f.Add(seed[0], seed[1], []byte{})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 49}, []byte{1}, []byte{9, 0, 0, 0, 1, 2, 3, 4, 1, 0})
	f.Fuzz(func(t *testing.T, seg, idx, pids []byte) {
		dir := t.TempDir()
		pdir := filepath.Join(dir, "partitions", "t-0")
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{filepath.Join(pdir, "0.dat"): seg, filepath.Join(pdir, "0.idx"): idx, filepath.Join(dir, "pids.log"): pids} {
			if err := os.WriteFile(name, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := recoverOpenTxns(dir); err != nil {
			t.Fatal(err)
		}
		if again, err := recoverOpenTxns(dir); err != nil || again != (recovery{}) {
			t.Fatalf("a second recovery did %+v (%v), want nothing", again, err)
		}
	})
}

// t2dir returns the segment and index bytes writeLog makes of batches.
func t2dir(f *testing.F, batches []entry) [2][]byte {
	dir := f.TempDir()
	writeLog(f, dir, "t", 0, nil, batches...)
	seg, _ := os.ReadFile(filepath.Join(dir, "partitions", "t-0", "0.dat"))
	idx, _ := os.ReadFile(filepath.Join(dir, "partitions", "t-0", "0.idx"))
	return [2][]byte{seg, idx}
}

// TestRestoreSequences replays a producer's batches into its window as the
// broker keeps it: the last five batches, the next sequence, and a fresh
// window at a new epoch. Windows the log does not hold are written back as
// the file had them, and a second recovery changes nothing.
func TestRestoreSequences(t *testing.T) {
	dir := t.TempDir()
	var batches []entry
	for range 7 {
		batches = append(batches, entry{"d", 7, 0})
	}
	batches = append(batches, entry{"c", 7, 0}, entry{"d", 7, 1}, entry{"d", 7, 1}, entry{"d", 8, 0})
	writeLog(t, dir, "t", 0, nil, batches...)
	other := `{"pid":99,"topic":"gone","partition":0,"entries":[{"first_seq":0,"next_seq":4,"offset":12},{},{},{},{}],"count":1,"at":1,"epoch":2,"seen":true,"next_seq":4}`
	stale := `{"pid":7,"topic":"t","partition":0,"entries":[{"first_seq":0,"next_seq":1,"offset":0},{},{},{},{}],"count":1,"at":1,"epoch":0,"seen":true,"next_seq":1}`
	if err := os.WriteFile(filepath.Join(dir, "seq_windows.json"), []byte(`{"version":1,"windows":[`+other+`,`+stale+`]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := recoverOpenTxns(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Sequences != 2 {
		t.Errorf("restored %d windows, want 2 (producer 7's stale one, producer 8's new one)", rec.Sequences)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "seq_windows.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f seqFile
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	got := map[int64]seqWindow{}
	for i, r := range f.Windows {
		var w seqWindow
		if err := json.Unmarshal(r, &w); err != nil {
			t.Fatal(err)
		}
		got[w.PID] = w
		if w.PID == 99 && string(r) != other {
			t.Errorf("window %d of a producer the log does not hold was rewritten:\n%s\nwant\n%s", i, r, other)
		}
	}
	// Producer 7 wrote sequences 0..6 at offsets 0..6 in epoch 0, then
	// 0 and 1 at offsets 8 and 9 in epoch 1 (7 is its commit marker).
	want7 := seqWindow{PID: 7, Topic: "t", Part: 0, Entries: [5]seqEntry{{0, 1, 8}, {1, 2, 9}}, Count: 2, At: 2, Epoch: 1, Seen: true, NextSeq: 2}
	want8 := seqWindow{PID: 8, Topic: "t", Part: 0, Entries: [5]seqEntry{{0, 1, 10}}, Count: 1, At: 1, Epoch: 0, Seen: true, NextSeq: 1}
	if got[7] != want7 || got[8] != want8 || len(got) != 3 {
		t.Errorf("windows %+v\nwant 7: %+v\n8: %+v\nand 99 kept", got, want7, want8)
	}
	if again, err := recoverOpenTxns(dir); err != nil || again != (recovery{}) {
		t.Errorf("a second recovery did %+v (%v), want nothing", again, err)
	}

	// Within one epoch the window keeps the last five batches.
	dir = t.TempDir()
	writeLog(t, dir, "t", 0, nil, batches[:7]...)
	if _, err := recoverOpenTxns(dir); err != nil {
		t.Fatal(err)
	}
	raw, _ = os.ReadFile(filepath.Join(dir, "seq_windows.json"))
	var one struct{ Windows []seqWindow }
	if err := json.Unmarshal(raw, &one); err != nil || len(one.Windows) != 1 {
		t.Fatalf("%s: %v", raw, err)
	}
	want := seqWindow{PID: 7, Topic: "t", Entries: [5]seqEntry{{5, 6, 5}, {6, 7, 6}, {2, 3, 2}, {3, 4, 3}, {4, 5, 4}}, Count: 5, At: 2, Seen: true, NextSeq: 7}
	if one.Windows[0] != want {
		t.Errorf("window after 7 batches %+v, want %+v", one.Windows[0], want)
	}
}
