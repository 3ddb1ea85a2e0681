package onceq

import "bytes"

// decodeCanonical reads a task record value exactly as AppendJSON writes
// it when no string needs an escape: its fields in its order, numbers in
// canonical decimal. It is the fast path of DecodeTaskRecord (a view
// restores millions of them); ok is false for anything else, which
// encoding/json then reads. It decodes what encoding/json would
// (FuzzDecodeTaskRecord checks).
func decodeCanonical(b []byte) (j taskRecordJSON, ok bool) {
	p := canonParser{b: b}
	if !p.lit(`{"v":1,"id":`) {
		return j, false
	}
	j.V = 1
	j.ID, ok = p.str()
	ok = ok && p.lit(`,"queue":`)
	if ok {
		j.Queue, ok = p.str()
	}
	ok = ok && p.lit(`,"state":`)
	if ok {
		j.State, ok = p.str()
	}
	if !ok {
		return j, false
	}
	num := func(name string, to *int64) bool {
		if !p.field(name) {
			return true // absent
		}
		n, ok := p.num()
		*to = n
		return ok
	}
	var attempt, maxAttempts, priority, partition int64
	ok = num("attempt", &attempt) && num("max_attempts", &maxAttempts) && num("priority", &priority) && num("enqueued", &j.Enqueued) &&
		num("started", &j.Started) && num("finished", &j.Finished) && num("due", &j.Due)
	for _, f := range []struct {
		name string
		to   *string
	}{{"worker", &j.Worker}, {"reason", &j.Reason}, {"error", &j.Error}} {
		if ok && p.field(f.name) {
			*f.to, ok = p.str()
		}
	}
	ok = ok && num("partition", &partition) && num("offset", &j.Offset)
	if ok && p.field("result") {
		var r string
		r, ok = p.str()
		j.Result = &r
	}
	// Out of range, a number takes the slow path, which refuses it.
	if !ok || !p.lit("}") || p.i != len(b) || attempt > MaxAttemptCount || maxAttempts > MaxAttemptCount || priority > MaxPriority || partition > 1<<31-1 {
		return taskRecordJSON{}, false
	}
	j.Attempt, j.MaxAttempts, j.Priority, j.Partition = int(attempt), int(maxAttempts), int(priority), int32(partition)
	return j, true
}

type canonParser struct {
	b []byte
	i int
}

func (p *canonParser) lit(s string) bool {
	if !bytes.HasPrefix(p.b[p.i:], []byte(s)) {
		return false
	}
	p.i += len(s)
	return true
}

// field consumes `,"name":` if it comes next.
func (p *canonParser) field(name string) bool {
	r := p.b[p.i:]
	if len(r) < len(name)+4 || r[0] != ',' || r[1] != '"' || string(r[2:2+len(name)]) != name || r[2+len(name)] != '"' || r[3+len(name)] != ':' {
		return false
	}
	p.i += len(name) + 4
	return true
}

// str reads a string without escapes, of printable ASCII or UTF-8 that
// needs none (no control characters, quotes, backslashes, U+2028, U+2029
// or invalid bytes: those take the slow path).
func (p *canonParser) str() (string, bool) {
	r := p.b[p.i:]
	if len(r) == 0 || r[0] != '"' {
		return "", false
	}
	for k := 1; k < len(r); k++ {
		c := r[k]
		switch {
		case c == '"':
			s := r[1:k]
			if !plainUTF8(s) {
				return "", false
			}
			p.i += k + 1
			return string(s), true
		case c < ' ' || c == '\\':
			return "", false
		}
	}
	return "", false
}

// plainUTF8 reports whether s is valid UTF-8 without U+2028 or U+2029,
// which AppendJSON escapes.
func plainUTF8(s []byte) bool {
	for _, c := range s {
		if c >= 0x80 {
			str := string(s)
			for _, r := range str {
				if r == 0xfffd || r == '\u2028' || r == '\u2029' {
					return false
				}
			}
			return true
		}
	}
	return true
}

// num reads a canonical decimal: digits, no sign, no leading zero, at most
// 18 of them.
func (p *canonParser) num() (int64, bool) {
	r := p.b[p.i:]
	k := 0
	var n int64
	for k < len(r) && k < 19 && r[k] >= '0' && r[k] <= '9' {
		n = n*10 + int64(r[k]-'0')
		k++
	}
	if k == 0 || k > 18 || r[0] == '0' && k > 1 {
		return 0, false
	}
	p.i += k
	return n, true
}
