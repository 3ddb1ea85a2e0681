package flow

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onceq/onceq"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/*.golden from this run")

func step(q, id string) *Node { return &Node{Task: &Step{Queue: q, ID: id}} }

// render writes emitted tasks one a line: queue, ID, input, cancel, and
// the continuation's frames (or a report's content).
func render(b *strings.Builder, tasks []onceq.Task) {
	for _, t := range tasks {
		fmt.Fprintf(b, "  emit %s/%s", t.Queue, t.ID)
		if t.Input != nil {
			fmt.Fprintf(b, " input=%q", t.Input)
		}
		if t.Queue == onceq.WorkflowQueue {
			m, err := DecodeMessage(t.Payload)
			if err != nil {
				fmt.Fprintf(b, " BAD REPORT %v\n", err)
				continue
			}
			r := m.Report
			fmt.Fprintf(b, " key=%s report{join %s %d/%d ok=%v output=%q", t.Key, r.Join.ID, r.Join.I, r.Join.N, r.OK, r.Output)
			if r.Fail != nil {
				fmt.Fprintf(b, " fail=%s/%s %s", r.Fail.Queue, r.Fail.ID, r.Fail.State)
			}
			fmt.Fprintf(b, " rest=%s}\n", frames(r.Rest))
			continue
		}
		c, err := Decode(t.Workflow)
		if err != nil {
			fmt.Fprintf(b, " BAD CONT %v\n", err)
			continue
		}
		fmt.Fprintf(b, " k=%s\n", frames(c.Frames))
	}
}

func frames(k []Frame) string {
	var parts []string
	for _, f := range k {
		switch {
		case f.Then != nil:
			var ids []string
			for _, n := range f.Then {
				ids = append(ids, n.Kind())
			}
			parts = append(parts, "then["+strings.Join(ids, ",")+"]")
		case f.Join != nil:
			parts = append(parts, fmt.Sprintf("join(%s %d/%d)", f.Join.ID, f.Join.I, f.Join.N))
		default:
			parts = append(parts, fmt.Sprintf("callbacks(ok %d, err %d)", len(f.OnSuccess), len(f.OnError)))
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// TestScenarios starts workflows and finishes their steps, and compares
// what each step emits with testdata/scenarios.golden (go test -rewrite
// regenerates it).
func TestScenarios(t *testing.T) {
	var b strings.Builder
	finish := func(label string, t0 onceq.Task, o Outcome) []onceq.Task {
		out, err := FinishTask(t0.Workflow, o)
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		fmt.Fprintf(&b, " %s ends ok=%v:\n", label, o.OK)
		render(&b, out)
		return out
	}
	begin := func(name string, n *Node) []onceq.Task {
		if err := n.Check(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out, err := Start("w", n, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fmt.Fprintf(&b, "%s: start:\n", name)
		render(&b, out)
		return out
	}
	fail := Failed(Failure{ID: "x", Queue: "q", State: onceq.StateDead, Reason: "max_attempts"})

	// A chain: each step emits the next with its output.
	out := begin("chain", &Node{Chain: []Node{*step("q", "a"), *step("q", "b"), *step("q", "c")}})
	out = finish("a", out[0], Succeeded([]byte("A")))
	out = finish("b", out[0], Succeeded([]byte("B")))
	finish("c", out[0], Succeeded([]byte("C")))

	// A chain that fails in the middle stops, and calls its OnError back.
	out = begin("chain with callbacks", &Node{Chain: []Node{*step("q", "a"), *step("q", "b")},
		OnSuccess: []Node{*step("cb", "ok")}, OnError: []Node{*step("cb", "err")}})
	finish("a fails", out[0], fail)

	// A chord: members report to their join with the callback below.
	out = begin("chord", &Node{Group: []Node{*step("q", "m0"), *step("q", "m1")}, Join: "w", Callback: step("q", "cb")})
	finish("m1", out[1], Succeeded([]byte("M1")))
	finish("m0 fails", out[0], fail)

	// A group inside a chain, with a chain inside the group.
	out = begin("nested", &Node{Chain: []Node{
		{Group: []Node{*step("q", "g0"), {Chain: []Node{*step("q", "g1a"), *step("q", "g1b")}}}, Join: "w/0"},
		*step("q", "after"),
	}})
	out = finish("g1a", out[1], Succeeded([]byte("G1A")))
	finish("g1b", out[0], Succeeded([]byte("G1B")))

	// What the workflow service continues after the last member: the
	// rest of a report.
	rest := []Frame{{Then: []Node{*step("q", "after")}}, {OnSuccess: []Node{*step("cb", "done")}}}
	got, err := Finish("w", rest, Succeeded(GroupOutput([][]byte{[]byte("x"), []byte("y")})))
	if err != nil {
		t.Fatal(err)
	}
	b.WriteString("join completes:\n")
	render(&b, got)

	golden := filepath.Join("testdata", "scenarios.golden")
	if *rewrite {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -rewrite to write it)", err)
	}
	if b.String() != string(want) {
		t.Fatalf("scenarios differ from %s (go test -rewrite rewrites it):\n%s", golden, b.String())
	}
}

func TestGroupOutputRoundTrip(t *testing.T) {
	in := [][]byte{[]byte("a"), {}, {0, 255}}
	out, err := ParseGroupOutput(GroupOutput(in))
	if err != nil || len(out) != 3 || !bytes.Equal(out[2], in[2]) || len(out[1]) != 0 {
		t.Fatalf("got %q %v", out, err)
	}
	if string(GroupOutput(nil)) != "[]" {
		t.Fatalf("an empty group's output is %s", GroupOutput(nil))
	}
}

// FuzzDecodeMessage: whatever a task of the workflow queue holds, decoding
// never panics, and what decodes survives encode and decode unchanged.
func FuzzDecodeMessage(f *testing.F) {
	def, _ := Message{Start: &Definition{W: "w", Root: Node{Chain: []Node{*step("q", "a"), {Group: []Node{*step("q", "b")}, Join: "w/1"}}},
		After: []Ref{{Queue: "q", ID: "z"}}}}.Encode()
	f.Add(def)
	rep, _ := Message{Report: &Report{W: "w", Join: JoinRef{ID: "w", I: 1, N: 2}, OK: true, Output: []byte("o"),
		Rest: []Frame{{Then: []Node{*step("q", "c")}}}}}.Encode()
	f.Add(rep)
	f.Add([]byte(`{"report":{"w":"w","join":{"id":"j","i":0,"n":1},"fail":{"id":"x"}}}`))
	f.Add([]byte(`{"start":{"w":"w","root":{"task":{"queue":"q","id":"a"},"chain":[]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMessage(b)
		if err != nil {
			return
		}
		again, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		m2, err := DecodeMessage(again)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", again, err)
		}
		a, _ := json.Marshal(m)
		c, _ := json.Marshal(m2)
		if !bytes.Equal(a, c) {
			t.Fatalf("decode(encode(m)) != m:\n%s\n%s", a, c)
		}
	})
}

// FuzzDecode: an onceq-workflow header never panics the decoder, and one
// that decodes can be finished either way.
func FuzzDecode(f *testing.F) {
	out, _ := Start("w", &Node{Chain: []Node{*step("q", "a"), *step("q", "b")}, OnError: []Node{*step("q", "e")}}, nil, nil)
	f.Add(out[0].Workflow)
	out, _ = Start("w", &Node{Group: []Node{*step("q", "a")}, Join: "w", Callback: step("q", "c")}, nil, nil)
	f.Add(out[0].Workflow)
	f.Add([]byte(`{"w":"w","k":[{"join":{"id":"j","i":3,"n":2}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		if _, err := Finish(c.W, c.Frames, Succeeded([]byte("x"))); err != nil {
			t.Logf("finish: %v", err) // a step of a bad backoff: refused, not a panic
		}
		if _, err := Finish(c.W, c.Frames, Failed(Failure{ID: "x"})); err != nil {
			t.Logf("finish: %v", err)
		}
	})
}
