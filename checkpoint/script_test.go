package checkpoint

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestBatchSemantics runs the scripts in testdata/batch: operations on a
// store, and its contents printed key by key.
func TestBatchSemantics(t *testing.T) {
	var (
		fs = vfs.NewMem()
		s  *Store
	)
	defer func() {
		if s != nil {
			s.Close()
		}
	}()
	runDataDriven(t, "testdata/batch", func(t *testing.T, c *ddCase) string {
		switch c.name() {
		case "open":
			opts := []Opt{ClusterID("c1"), Group("g1"), FS(fs), Logger(testLogger(t))}
			if v, ok := c.args["window"]; ok {
				d, err := time.ParseDuration(v)
				if err != nil {
					t.Fatal(err)
				}
				opts = append(opts, DedupWindow(d))
			}
			if v, ok := c.args["group"]; ok {
				opts = append(opts, Group(v))
			}
			var err error
			if s, err = Open("/store", opts...); err != nil {
				s = nil
				return "error: " + err.Error()
			}
			return "ok"
		case "close":
			err := s.Close()
			s = nil
			return errString(err)
		case "batch":
			return runBatch(t, s, c)
		case "apply":
			var entries []Entry
			for _, l := range lines(c.input) {
				f := strings.Fields(l)
				e := parseEntry(t, c, f[1:])
				e.Offset = atoi(t, f[0])
				entries = append(entries, e)
			}
			next := atoi(t, c.arg(t, "next"))
			return errString(s.Apply(parseTP(t, strings.Fields(c.cmd)[1]), entries, next))
		case "has":
			f := strings.Fields(c.cmd)[1:]
			tp, ids := parseTP(t, f[0]), f[1:]
			many, err := s.HasMany(tp, ids)
			if err != nil {
				return "error: " + err.Error()
			}
			var out []string
			for i, id := range ids {
				one, err := s.Has(tp, id)
				if err != nil || one != many[i] {
					t.Fatalf("%s: Has(%s) = %v, %v; HasMany says %v", c.pos, id, one, err, many[i])
				}
				out = append(out, fmt.Sprintf("%s=%v", id, one))
			}
			return strings.Join(out, " ")
		case "get":
			f := strings.Fields(c.cmd)[1:]
			v, ok, err := s.Get(parseTP(t, f[0]), []byte(f[1]))
			if err != nil || !ok {
				return fmt.Sprintf("absent %s", errString(err))
			}
			return fmt.Sprintf("%q", v)
		case "checkpoint":
			o, ok, err := s.Checkpoint(parseTP(t, strings.Fields(c.cmd)[1]))
			return fmt.Sprintf("%+v %v %s", o, ok, errString(err))
		case "partitions":
			tps, err := s.Partitions()
			return fmt.Sprintf("%v %s", tps, errString(err))
		case "expire":
			limit := 0
			if v, ok := c.args["limit"]; ok {
				limit = int(atoi(t, v))
			}
			removed, err := s.ExpireProcessed(context.Background(), time.Unix(atoi(t, c.arg(t, "now")), 0), limit)
			var out []string
			for _, r := range removed {
				out = append(out, r.TP.String()+":"+r.ID)
			}
			return fmt.Sprintf("removed %d: %s %s", len(removed), strings.Join(out, " "), errString(err))
		case "drop":
			return errString(s.DropPartition(parseTP(t, strings.Fields(c.cmd)[1])))
		case "dump":
			return dumpStore(t, s)
		}
		t.Fatalf("%s: unknown command %q", c.pos, c.name())
		return ""
	})
}

// runBatch builds a batch from the case's input, one operation per line:
//
//	mark TP ID AT | unmark TP ID | set TP KEY VALUE | delete TP KEY | offsets TP SOURCE CHANGELOG
//
// and commits it unless the command says "nocommit".
func runBatch(t *testing.T, s *Store, c *ddCase) string {
	b := s.NewBatch()
	defer b.Close()
	for _, l := range lines(c.input) {
		f := strings.Fields(l)
		tp := parseTP(t, f[1])
		var err error
		switch f[0] {
		case "offsets":
			err = b.SetOffsets(tp, Offsets{Source: atoi(t, f[2]), Changelog: atoi(t, f[3])})
		default:
			err = b.apply(tp, parseEntry(t, c, append(f[:1:1], f[2:]...)))
		}
		if err != nil {
			return fmt.Sprintf("%s: error: %v", l, err)
		}
	}
	if _, ok := c.args["nocommit"]; ok {
		return "discarded"
	}
	return errString(b.Commit())
}

// parseEntry parses "mark ID AT", "unmark ID", "set KEY VALUE" or "delete KEY".
func parseEntry(t *testing.T, c *ddCase, f []string) Entry {
	switch f[0] {
	case "mark":
		return Entry{Kind: KindMark, ID: f[1], At: time.Unix(atoi(t, f[2]), 0)}
	case "unmark":
		return Entry{Kind: KindMark, ID: f[1], Delete: true}
	case "set":
		return Entry{Kind: KindState, Key: []byte(f[1]), Value: []byte(f[2])}
	case "delete":
		return Entry{Kind: KindState, Key: []byte(f[1]), Delete: true}
	}
	t.Fatalf("%s: unknown operation %q", c.pos, f[0])
	return Entry{}
}

func parseTP(t *testing.T, s string) TP {
	topic, p, ok := strings.Cut(s, "/")
	if !ok {
		t.Fatalf("partition %q: want topic/partition", s)
	}
	return TP{Topic: topic, Partition: int32(atoi(t, p))}
}

func atoi(t *testing.T, s string) int64 {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func lines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func errString(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

// dumpStore prints every key of the store, decoded.
func dumpStore(t *testing.T, s *Store) string {
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, dumpKV(it.Key(), it.Value()))
	}
	if err := it.Error(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		return "(empty)"
	}
	return strings.Join(out, "\n")
}

func dumpKV(key, value []byte) string {
	k, err := decodeKey(key)
	if err != nil {
		return fmt.Sprintf("%x = %x: %v", key, value, err)
	}
	var v string
	switch k.family {
	case familyMeta:
		m, err := decodeMeta(value)
		v = fmt.Sprintf("format=%d cluster=%q group=%q %v", m.Format, m.Cluster, m.Group, errOrEmpty(err))
	case familyPartition:
		tp, err := decodeTP(value)
		v = fmt.Sprintf("%s %v", tp, errOrEmpty(err))
	case familyCheckpoint:
		o, err := decodeOffsets(value)
		v = fmt.Sprintf("source=%d changelog=%d %v", o.Source, o.Changelog, errOrEmpty(err))
	case familyID:
		at, err := decodeIDValue(value)
		v = fmt.Sprintf("at %s %v", formatMillis(at), errOrEmpty(err))
	case familyState:
		v = fmt.Sprintf("%q", value)
	case familyExpiry:
		var ids []string
		err := decodeExpiryRecord(k.at, value, func(e expiryEntry) {
			ids = append(ids, fmt.Sprintf("%s@%d", e.ID, e.At/1000))
		})
		return strings.TrimSpace(fmt.Sprintf("#%d expiry at %d: %s %v", k.h, k.at/1000, strings.Join(ids, " "), errOrEmpty(err)))
	}
	return strings.TrimSpace(fmt.Sprintf("%s = %s", k, v))
}

func errOrEmpty(err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return ""
}

// testLogger logs through t.Log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
