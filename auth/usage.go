package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
)

// A UsageKind is what a usage report counts: a token's consumes
// (UsageRead, bounded by its Limit's Read) or its publishes (UsageWrite,
// by Write).
type UsageKind byte

// The kinds of usage, as a usage report's key names them.
const (
	UsageRead  UsageKind = 'r'
	UsageWrite UsageKind = 'w'
)

func (k UsageKind) String() string {
	if k == UsageRead {
		return "read"
	}
	return "write"
}

// A Usage is a usage report: one server's count of a token's requests of
// one kind in one window of the token's limit (Unix time / Interval). A
// server that counts a token's requests reports its count of the current
// window as it changes, so that every server knows what the others
// admitted; the store keeps each server's last report.
//
// A report's key is usage/<token ID>/<r|w>/<server>, its value
// {"v":1,"window":..,"interval":..,"count":..}, and a tombstone forgets
// it: no token ID holds a '/'.
type Usage struct {
	Token    string // the token's ID
	Kind     UsageKind
	Server   string // 1 to maxServerLen letters, digits, '_' or '-'
	Interval int64  // seconds
	Window   int64  // Unix time / Interval
	Count    int64
}

// End is when u's window ends.
func (u Usage) End() time.Time { return time.Unix((u.Window+1)*u.Interval, 0) }

const (
	usagePrefix  = "usage/"
	maxServerLen = 64
)

// usageOf is what the store keeps usage reports by: a token and a kind.
type usageOf struct {
	id   string
	kind UsageKind
}

func (u Usage) key() []byte {
	return []byte(usagePrefix + u.Token + "/" + string(u.Kind) + "/" + u.Server)
}

// usageValue is a usage report's record.
type usageValue struct {
	V        int   `json:"v"`
	Window   int64 `json:"window"`
	Interval int64 `json:"interval"`
	Count    int64 `json:"count"`
}

// decodeUsage reads a usage report; a nil value forgets one (its Usage
// has the key's fields alone).
func decodeUsage(key, val []byte) (Usage, error) {
	rest, ok := strings.CutPrefix(string(key), usagePrefix)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 || !ValidID(parts[0]) || len(parts[1]) != 1 || !validServer(parts[2]) ||
		UsageKind(parts[1][0]) != UsageRead && UsageKind(parts[1][0]) != UsageWrite {
		return Usage{}, fmt.Errorf("auth: key %q: want usage/<token ID>/<r|w>/<server>", key)
	}
	u := Usage{Token: parts[0], Kind: UsageKind(parts[1][0]), Server: parts[2]}
	if val == nil {
		return u, nil
	}
	var v usageValue
	if err := json.Unmarshal(val, &v); err != nil {
		return Usage{}, fmt.Errorf("auth: usage report %s: %w", key, err)
	}
	if v.V != 1 || v.Interval < 1 || v.Interval > MaxLimitInterval || v.Window < 0 || v.Window > onceq.MaxUnixMilli/1000/v.Interval ||
		v.Count < 0 || v.Count > MaxLimitCount {
		return Usage{}, fmt.Errorf("auth: usage report %s: want version 1, an interval of 1 to %d s, a window and a count of 0 to %d", key, MaxLimitInterval, MaxLimitCount)
	}
	u.Interval, u.Window, u.Count = v.Interval, v.Window, v.Count
	return u, nil
}

// validServer says whether name may name a server in a usage report.
func validServer(name string) bool {
	return name != "" && len(name) <= maxServerLen && badNameByte(name) < 0
}

// applyUsage applies a usage report, or forgets one.
func (s *Store) applyUsage(rec *kgo.Record) {
	u, err := decodeUsage(rec.Key, rec.Value)
	if err != nil {
		s.log.Warn("usage report skipped", "offset", rec.Offset, "err", err)
		return
	}
	of := usageOf{u.Token, u.Kind}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rec.Value == nil {
		delete(s.usage[of], u.Server)
		if len(s.usage[of]) == 0 {
			delete(s.usage, of)
		}
		return
	}
	if s.usage[of] == nil {
		s.usage[of] = map[string]Usage{}
	}
	s.usage[of][u.Server] = u
}

// Usage is the sum of the counts of the token's requests of kind that
// every server but except last reported for window of interval.
func (s *Store) Usage(id string, kind UsageKind, interval, window int64, except string) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var n int64
	for server, u := range s.usage[usageOf{id, kind}] {
		if server != except && u.Interval == interval && u.Window == window {
			n += u.Count
		}
	}
	return n
}

// ReportUsage writes a usage report, without waiting for it: a report
// that fails is logged (once while they keep failing), and the next one
// replaces it.
func (s *Store) ReportUsage(u Usage) {
	val, err := json.Marshal(usageValue{V: 1, Window: u.Window, Interval: u.Interval, Count: u.Count})
	if err != nil {
		panic(err) // a struct of ints
	}
	s.f.TryProduce(context.Background(), &kgo.Record{Key: u.key(), Value: val}, s.reported)
}

// ForgetUsage writes the tombstone of a server's usage report of a
// token's requests of kind, without waiting for it.
func (s *Store) ForgetUsage(id string, kind UsageKind, server string) {
	s.f.TryProduce(context.Background(), &kgo.Record{Key: Usage{Token: id, Kind: kind, Server: server}.key()}, s.reported)
}

// reported logs the first of a run of usage reports that failed.
func (s *Store) reported(rec *kgo.Record, err error) {
	if err == nil {
		s.reportFailing.Store(false)
	} else if !s.reportFailing.Swap(true) {
		s.log.Warn("writing a usage report failed; limits count this server's requests alone until one succeeds", "key", string(rec.Key), "err", err)
	}
}

// SweepUsage forgets the usage reports whose window ended before
// before, and returns how many: the reports of a server that stopped.
// A server forgets its own reports once their window passed, so another
// report outlives its window only when its server stopped first.
func (s *Store) SweepUsage(before time.Time) int {
	var old []Usage
	s.mu.RLock()
	for _, byServer := range s.usage {
		for _, u := range byServer {
			if u.End().Before(before) {
				old = append(old, u)
			}
		}
	}
	s.mu.RUnlock()
	for _, u := range old {
		s.ForgetUsage(u.Token, u.Kind, u.Server)
	}
	return len(old)
}

// FlushUsage returns once the usage reports written so far were written
// or failed, or ctx's error.
func (s *Store) FlushUsage(ctx context.Context) error { return s.f.Flush(ctx) }
