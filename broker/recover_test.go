package broker

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
	for off, b := range batches {
		var rb kmsg.RecordBatch
		if b.kind == "d" {
			r := kmsg.Record{Value: []byte("v")}
			r.Length = int32(len(r.AppendTo(nil)) - 1)
			rb = kmsg.RecordBatch{FirstOffset: int64(off), Magic: 2, Attributes: attrTransaction,
				ProducerID: b.pid, ProducerEpoch: b.epoch, NumRecords: 1, Records: r.AppendTo(nil)}
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
		name:    "whole transactions: nothing to do",
		logs:    [][]entry{{d(1, 0), c(1, 0), d(1, 1), a(1, 1)}, {d(1, 0), c(1, 0)}},
		want:    [][]entry{{d(1, 0), c(1, 0), d(1, 1), a(1, 1)}, {d(1, 0), c(1, 0)}},
		wantRec: recovery{},
	}, {
		name:       "open transaction: aborted, producer fenced",
		logs:       [][]entry{{d(1, 0), c(1, 0), d(1, 1), d(2, 5)}, {d(1, 1)}},
		want:       [][]entry{{d(1, 0), c(1, 0), d(1, 1), d(2, 5), a(1, 1), a(2, 5)}, {d(1, 1), a(1, 1)}},
		wantRec:    recovery{Aborted: 3, Producers: 2},
		wantEpochs: map[int64]int16{1: 2, 2: 6},
	}, {
		name:       "commit cut between partitions: completed",
		logs:       [][]entry{{d(1, 3), c(1, 3)}, {d(1, 3)}},
		want:       [][]entry{{d(1, 3), c(1, 3)}, {d(1, 3), c(1, 3)}},
		wantRec:    recovery{Committed: 1, Producers: 1},
		wantEpochs: map[int64]int16{1: 4},
	}, {
		name:       "an epoch that carried two transactions names neither: aborted",
		logs:       [][]entry{{d(1, 0), c(1, 0), d(1, 0), c(1, 0)}, {d(1, 0)}},
		want:       [][]entry{{d(1, 0), c(1, 0), d(1, 0), c(1, 0)}, {d(1, 0), a(1, 0)}},
		wantRec:    recovery{Aborted: 1, Producers: 1},
		wantEpochs: map[int64]int16{1: 1},
	}, {
		name:       "data after a marker of its own epoch: aborted everywhere",
		logs:       [][]entry{{d(1, 0), c(1, 0), d(1, 0)}, {d(1, 0)}},
		want:       [][]entry{{d(1, 0), c(1, 0), d(1, 0), a(1, 0)}, {d(1, 0), a(1, 0)}},
		wantRec:    recovery{Aborted: 2, Producers: 1},
		wantEpochs: map[int64]int16{1: 1},
	}, {
		name:       "torn batch at the end: truncated first",
		logs:       [][]entry{{d(1, 0)}},
		tail:       []byte{0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 40, 1, 2, 3},
		want:       [][]entry{{d(1, 0), a(1, 0)}},
		wantRec:    recovery{Aborted: 1, Producers: 1},
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
