package workflow

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/internal/flow"
)

// defaultQueue gives lines without a queue the queue "q".
func defaultQueue(q string) (string, error) {
	if q == "" {
		return "q", nil
	}
	if q == "refused" {
		return "", errors.New("not this one")
	}
	return q, nil
}

// shape compiles a parsed line and prints its definition as JSON.
func shape(t *testing.T, l Line) string {
	t.Helper()
	id := l.ID
	if id == "" {
		id = defaultID("", l.Node)
	}
	def, err := compile(id, l.Node, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := shapeOf(&def)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseLine(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	for _, c := range []struct {
		line, want string
	}{
		{`{"id":"w","chain":[{"payload":"a"},{"queue":"r","id":"b","delay":"1s"}]}`,
			`{"w":"w","root":{"chain":[{"task":{"queue":"q","generated":true}},{"task":{"queue":"r","id":"b"}}]}}`},
		{`{"id":"w","chord":{"group":[{"payload":"a"},{"chain":[{"payload":"b"},{"payload":"c"}]}],"callback":{"queue":"r"}},"on_error":[{"queue":"alerts"}]}`,
			`{"w":"w","root":{"group":[{"task":{"queue":"q","generated":true}},{"chain":[{"task":{"queue":"q","generated":true}},{"task":{"queue":"q","generated":true}}]}],"callback":{"task":{"queue":"r","generated":true}},"join":"w","on_error":[{"task":{"queue":"alerts","generated":true}}]}}`},
		{`{"id":"b","payload":"x","depends_on":["a",{"queue":"other","id":"z"}]}`,
			`{"w":"q/b","root":{"task":{"queue":"q","id":"b"}},"after":[{"queue":"q","id":"a"},{"queue":"other","id":"z"}]}`},
		{`{"id":"w","group":[{"payload":"a","on_success":[{"queue":"r","id":"done"}]}]}`,
			`{"w":"w","root":{"group":[{"task":{"queue":"q","generated":true},"on_success":[{"task":{"queue":"r","id":"done"}}]}],"join":"w"}}`},
	} {
		l, ok, err := ParseLine([]byte(c.line), now, defaultQueue)
		if err != nil || !ok {
			t.Fatalf("%s: %v %v", c.line, ok, err)
		}
		if got := shape(t, l); got != c.want {
			t.Errorf("%s\n got %s\nwant %s", c.line, got, c.want)
		}
	}
	if _, ok, err := ParseLine([]byte(`{"queue":"q","payload":"x"}`), now, defaultQueue); ok || err != nil {
		t.Fatalf("a task line: ok %v, err %v; want not a workflow", ok, err)
	}
}

func TestParseLineRefuses(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{`{"chain":{"payload":"a"}}`, "chain: want a JSON array"},
		{`{"chain":[]}`, "chain: an empty list"},
		{`{"chain":[{"payload":"a","bogus":1}]}`, `chain[0]: onceq: invalid JSON line: unknown field "bogus"`},
		{`{"chain":[{"payload":"a"}],"payload":"b"}`, `"payload": a chain line holds "chain"`},
		{`{"chain":[{"delay":"soon"}]}`, "chain[0].delay"},
		{`{"chain":[{"queue":"refused"}]}`, "chain[0].queue: not this one"},
		{`{"chain":[{"id":"x","group":[{"payload":"a"}]}]}`, `"id" names a workflow`},
		{`{"chord":{"group":[{"payload":"a"}]}}`, `a chord holds "group" (a list) and "callback"`},
		{`{"chord":{"group":[],"callback":{}}}`, "chord.group: an empty list"},
		{`{"callback":{"payload":"a"},"payload":"b"}`, `"callback" belongs in a "chord"`},
		{`{"chain":[{"payload":"a","depends_on":["x"]}]}`, "only the line's root has dependencies"},
		{`{"chain":[{"payload":"a"}],"depends_on":["x"]}`, `a chain's dependencies name their queue`},
		{`{"payload":"a","depends_on":[]}`, "depends_on: want a non-empty list"},
		{`{"payload":"a","depends_on":[{"queue":"q"}]}`, `depends_on[0]: want a task ID`},
		{`{"payload":"a","depends_on":[{"queue":"q","id":"x","extra":1}]}`, `depends_on[0]: want a task ID`},
		{`{"id":"a#b","chain":[{"payload":"a"}]}`, "'#' is reserved"},
		{`{"chain":[{"payload":"a"}],"chain":[{"payload":"b"}]}`, "appears twice"},
	} {
		_, _, err := ParseLine([]byte(c.line), time.Now(), defaultQueue)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v; want an error with %q", c.line, err, c.want)
		}
	}
}

// FuzzParseLine: any line either is refused with an error, is a task line
// (not a workflow), or is a workflow that compiles to a definition the
// service decodes again.
func FuzzParseLine(f *testing.F) {
	f.Add([]byte(`{"id":"w","chain":[{"payload":"a"},{"group":[{"payload":"b"}]}]}`))
	f.Add([]byte(`{"id":"w","chord":{"group":[{"payload":"a"}],"callback":{"queue":"r"}},"on_error":[{"queue":"e"}]}`))
	f.Add([]byte(`{"id":"b","payload":"x","depends_on":["a",{"queue":"o","id":"z"}]}`))
	f.Add([]byte(`{"queue":"q"}`))
	now := time.UnixMilli(1_800_000_000_000)
	f.Fuzz(func(t *testing.T, line []byte) {
		l, ok, err := ParseLine(line, now, defaultQueue)
		if err != nil || !ok {
			return
		}
		start, err := Prepare(l.ID, l.Node, 0)
		if err != nil {
			return // a workflow the line's syntax allows but Submit refuses
		}
		m, err := flow.DecodeMessage(start.Payload)
		if err != nil || m.Start == nil {
			b, _ := json.Marshal(m)
			t.Fatalf("the definition of %s does not decode: %v (%s)", line, err, b)
		}
	})
}

func TestParseLineFindsFieldsAfterLookalikes(t *testing.T) {
	l, ok, err := ParseLine([]byte(`{"id":"wf-chain-group","chain":[{"payload":"chain"}]}`), time.Now(), defaultQueue)
	if err != nil || !ok || l.ID != "wf-chain-group" {
		t.Fatalf("got %+v %v %v", l, ok, err)
	}
}

func TestCheckCycles(t *testing.T) {
	task := func(q, id string) Node { return Task(onceq.Task{Queue: q, ID: id}) }
	a := task("q", "a").After(Ref{Queue: "q", ID: "c"})
	b := Chain(task("q", "b0"), task("q", "b")).After(Ref{Queue: "q", ID: "a"})
	c := task("q", "c").After(Ref{Queue: "q", ID: "b"})
	if err := CheckCycles(a, b, c); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "dependency cycle") {
		t.Fatalf("a -> c -> b -> a: %v", err)
	}
	free := task("q", "c").After(Ref{Queue: "q", ID: "elsewhere"})
	if err := CheckCycles(a, b, free); err != nil {
		t.Fatalf("no cycle: %v", err)
	}
}
