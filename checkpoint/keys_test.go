package checkpoint

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKeyLayout pins the on-disk key and value layout and the changelog
// encoding: a change to testdata/keys is a change of the format.
func TestKeyLayout(t *testing.T) {
	runDataDriven(t, "testdata/keys", func(t *testing.T, c *ddCase) string {
		u := func(key string) uint64 {
			v, err := strconv.ParseUint(c.arg(t, key), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", c.pos, err)
			}
			return v
		}
		i := func(key string) int64 {
			v, err := strconv.ParseInt(c.arg(t, key), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", c.pos, err)
			}
			return v
		}
		unhex := func(key string) []byte {
			b, err := hex.DecodeString(c.args[key])
			if err != nil {
				t.Fatalf("%s: %v", c.pos, err)
			}
			return b
		}
		h := func() handle { return handle(u("h")) }
		switch c.name() {
		case "meta":
			return showKey(metaKey())
		case "partition":
			return showKey(partitionKey(h()))
		case "checkpoint":
			return showKey(checkpointKey(h()))
		case "id":
			return showKey(appendIDKey(nil, h(), c.arg(t, "id")))
		case "state":
			return showKey(appendStateKey(nil, h(), []byte(c.arg(t, "key"))))
		case "expiry":
			return showKey(expiryKey(h(), u("at"), u("sum")))
		case "bounds":
			lo, hi := handleBounds(h())
			flo, fhi := familyBounds(h(), c.arg(t, "family")[0])
			return fmt.Sprintf("partition [%x, %x)\nfamily [%x, %x)\nexpiry upper at=%d: %x",
				lo, hi, flo, fhi, u("at"), expiryUpper(h(), u("at")))
		case "decode-key":
			return showKey(unhex("hex"))
		case "meta-value":
			v := encodeMeta(meta{Format: u("format"), Cluster: c.arg(t, "cluster"), Group: c.arg(t, "group")})
			return showValue(v, func() (any, error) { return decodeMeta(v) })
		case "offsets-value":
			v := encodeOffsets(Offsets{Source: i("source"), Changelog: i("changelog")})
			return showValue(v, func() (any, error) { return decodeOffsets(v) })
		case "partition-value":
			v := encodeTP(TP{Topic: c.arg(t, "topic"), Partition: int32(i("partition"))})
			return showValue(v, func() (any, error) { return decodeTP(v) })
		case "decode-value":
			v := unhex("hex")
			return showValue(v, func() (any, error) {
				switch c.arg(t, "kind") {
				case "meta":
					return decodeMeta(v)
				case "offsets":
					return decodeOffsets(v)
				case "partition":
					return decodeTP(v)
				case "id":
					return decodeIDValue(v)
				}
				t.Fatalf("%s: unknown kind", c.pos)
				return nil, nil
			})
		case "expiry-record":
			// Input: one "id at" per line.
			var entries []expiryEntry
			var at uint64
			for _, l := range strings.Split(c.input, "\n") {
				id, ms, _ := strings.Cut(l, " ")
				v, _ := strconv.ParseUint(ms, 10, 64)
				entries = append(entries, expiryEntry{ID: id, At: v})
				at = max(at, v)
			}
			var v []byte
			for _, e := range entries {
				v = appendExpiryEntry(v, at, e)
			}
			var out []string
			err := decodeExpiryRecord(at, v, func(e expiryEntry) { out = append(out, fmt.Sprintf("%s@%d", e.ID, e.At)) })
			return fmt.Sprintf("record at=%d value=%x\ndecoded: %s %v", at, v, strings.Join(out, " "), err)
		case "changelog":
			var e Entry
			switch c.arg(t, "kind") {
			case "mark":
				e = Entry{Kind: KindMark, ID: c.arg(t, "id"), At: time.UnixMilli(i("at"))}
			case "unmark":
				e = Entry{Kind: KindMark, ID: c.arg(t, "id"), Delete: true}
			case "state":
				e = Entry{Kind: KindState, Key: []byte(c.arg(t, "key")), Value: []byte(c.args["value"])}
			case "unset":
				e = Entry{Kind: KindState, Key: []byte(c.arg(t, "key")), Delete: true}
			case "marks":
				// ids=ID@MS,ID@MS
				e.Kind = KindMarks
				for _, m := range strings.Split(c.args["ids"], ",") {
					id, ms, _ := strings.Cut(m, "@")
					n, _ := strconv.ParseInt(ms, 10, 64)
					e.Marks = append(e.Marks, Mark{ID: id, At: time.UnixMilli(n)})
				}
			case "finished":
				// ranges=FROM-TO,FROM-TO (half-open)
				for _, r := range strings.Split(c.args["ranges"], ",") {
					if r == "" {
						continue
					}
					from, to, _ := strings.Cut(r, "-")
					f, _ := strconv.ParseInt(from, 10, 64)
					u, _ := strconv.ParseInt(to, 10, 64)
					e.Finished = append(e.Finished, OffsetRange{f, u})
				}
				e.Kind = KindFinished
			}
			k, v := e.Encode()
			d, err := DecodeChangelog(k, v)
			return fmt.Sprintf("key=%x value=%x\n%s", k, v, showEntry(d, err))
		case "decode-changelog":
			var v []byte
			if _, ok := c.args["value"]; ok {
				v = unhex("value")
			}
			return showEntry(DecodeChangelog(unhex("key"), v))
		}
		t.Fatalf("%s: unknown command %q", c.pos, c.name())
		return ""
	})
}

func showKey(k []byte) string {
	d, err := decodeKey(k)
	if err != nil {
		return fmt.Sprintf("%x\nerror: %v", k, err)
	}
	return fmt.Sprintf("%x\n%s", k, d)
}

func showValue(v []byte, decode func() (any, error)) string {
	d, err := decode()
	if err != nil {
		return fmt.Sprintf("%x\nerror: %v", v, err)
	}
	return fmt.Sprintf("%x\n%+v", v, d)
}

func showEntry(e Entry, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	switch {
	case e.Kind == KindMark && e.Delete:
		return fmt.Sprintf("unmark %q", e.ID)
	case e.Kind == KindMark:
		return fmt.Sprintf("mark %q at %s", e.ID, e.At.UTC().Format(time.RFC3339Nano))
	case e.Kind == KindFence:
		return "fence"
	case e.Kind == KindFinished:
		return "finished " + e.Finished.String()
	case e.Kind == KindMarks && e.Delete:
		return fmt.Sprintf("unmarks record %x", e.Record)
	case e.Kind == KindMarks:
		var ms []string
		for _, m := range e.Marks {
			ms = append(ms, fmt.Sprintf("%s@%d", m.ID, m.At.UnixMilli()))
		}
		return fmt.Sprintf("marks record %x: %s", e.Record, strings.Join(ms, " "))
	case e.Delete:
		return fmt.Sprintf("unset %q", e.Key)
	}
	return fmt.Sprintf("state %q = %q", e.Key, e.Value)
}
