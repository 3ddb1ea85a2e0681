package demo

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/handlers"
	"github.com/onceq/onceq/workflow"
)

// DueHeader holds a delayed task's due time, kept in the output to check
// "never early".
const DueHeader = "demo-due"

// Names are the names one run of the demo uses: its queue, the output
// queue its workers write to, their group, and the start of its workflow
// IDs (workflow IDs are the cluster's, not a queue's).
type Names struct {
	Queue, Out, Group, Workflows string
}

// NamesFor returns the names of the run named run: demo-orders,
// demo-done, group demo and workflows chord-N and chain-N for the run of
// an own fresh broker (run ""), and demo-<run>-orders, demo-<run>-done,
// demo-<run> and <run>-chord-N for a run on a cluster that other runs
// may have used.
func NamesFor(run string) Names {
	if run == "" {
		return Names{Queue: "demo-orders", Out: "demo-done", Group: "demo"}
	}
	return Names{Queue: "demo-" + run + "-orders", Out: "demo-" + run + "-done", Group: "demo-" + run, Workflows: run + "-"}
}

// Mix is how many tasks of each kind the demo submits.
type Mix struct {
	// Immediate tasks are due at once; Duplicates of them are submitted
	// a second time with the same ID.
	Immediate, Duplicates int
	// Delayed tasks are due between 1s and MaxDelay.
	Delayed  int
	MaxDelay time.Duration
	// Flaky tasks fail twice, then succeed; Doomed ones always fail and
	// end in the dead letters.
	Flaky, Doomed int
	// Chords of ChordMembers members each, and Chains of ChainSteps steps
	// each, are workflows; a tenth of their tasks fail once first.
	Chords, ChordMembers, Chains, ChainSteps int
}

// Plan is the tasks of a Mix and what must become of them.
type Plan struct {
	Mix   Mix
	Names Names
	// Tasks in the order to submit them.
	Tasks []onceq.Task
	// OK are the IDs that must end in Out once each, Dead the ones that
	// must end in the dead letters once each.
	OK, Dead []string
	// Workflows are the chords and chains, by ID: their tasks are in OK.
	Chords, Chains []string
}

// NewPlan builds the tasks of mix for the run of names, the delayed ones
// due from now on.
func NewPlan(mix Mix, names Names, now time.Time) *Plan {
	p := &Plan{Mix: mix, Names: names}
	queue := names.Queue
	add := func(t onceq.Task) { p.Tasks = append(p.Tasks, t) }
	for i := 0; i < mix.Immediate; i++ {
		id := fmt.Sprintf("order-%d", i)
		p.OK = append(p.OK, id)
		add(onceq.Task{ID: id, Queue: queue, Payload: []byte(`{"order":` + strconv.Itoa(i) + `}`)})
	}
	for i := 0; i < mix.Delayed; i++ {
		id := fmt.Sprintf("reminder-%d", i)
		due := now.Add(time.Second + time.Duration(i)*(mix.MaxDelay-time.Second)/time.Duration(max(mix.Delayed, 1)))
		p.OK = append(p.OK, id)
		add(onceq.Task{ID: id, Queue: queue, Due: due, Headers: []onceq.Header{{Key: DueHeader, Value: []byte(strconv.FormatInt(due.UnixMilli(), 10))}}})
	}
	for i := 0; i < mix.Duplicates; i++ {
		add(onceq.Task{ID: fmt.Sprintf("order-%d", i*max(mix.Immediate/max(mix.Duplicates, 1), 1)), Queue: queue, Payload: []byte("again")})
	}
	for i := 0; i < mix.Flaky; i++ {
		id := fmt.Sprintf("flaky-%d", i)
		p.OK = append(p.OK, id)
		add(onceq.Task{ID: id, Queue: queue, Headers: []onceq.Header{{Key: handlers.FailHeader, Value: []byte("2")}}})
	}
	for i := 0; i < mix.Doomed; i++ {
		id := fmt.Sprintf("doomed-%d", i)
		p.Dead = append(p.Dead, id)
		add(onceq.Task{ID: id, Queue: queue, Headers: []onceq.Header{{Key: handlers.FailHeader, Value: []byte("always")}}})
	}
	step := func(n int) workflow.Node {
		t := onceq.Task{Queue: queue}
		if n%10 == 3 {
			t.Headers = []onceq.Header{{Key: handlers.FailHeader, Value: []byte("1")}}
		}
		return workflow.Task(t)
	}
	for i := 0; i < mix.Chords; i++ {
		id := fmt.Sprintf("%schord-%d", names.Workflows, i)
		members := make([]workflow.Node, mix.ChordMembers)
		for m := range members {
			members[m] = step(m)
			p.OK = append(p.OK, fmt.Sprintf("%s/%d", id, m))
		}
		p.addWorkflow(id, workflow.Chord(workflow.Group(members...), step(0)))
		p.OK, p.Chords = append(p.OK, id+"/cb"), append(p.Chords, id)
	}
	for i := 0; i < mix.Chains; i++ {
		id := fmt.Sprintf("%schain-%d", names.Workflows, i)
		steps := make([]workflow.Node, mix.ChainSteps)
		for s := range steps {
			steps[s] = step(i + s)
			p.OK = append(p.OK, fmt.Sprintf("%s/%d", id, s))
		}
		p.addWorkflow(id, workflow.Chain(steps...))
		p.Chains = append(p.Chains, id)
	}
	return p
}

// addWorkflow adds a workflow's start task to the plan; its definition is
// the plan's own, so it is never refused.
func (p *Plan) addWorkflow(id string, n workflow.Node) {
	t, err := workflow.Prepare(id, n, 0)
	if err != nil {
		panic(err)
	}
	p.Tasks = append(p.Tasks, t)
}

// Check is the outcome of one check: whether it held, and what it found.
type Check struct {
	OK   bool
	Text string
}

func check(ok bool, format string, args ...any) Check {
	return Check{OK: ok, Text: fmt.Sprintf(format, args...)}
}

// CheckOutputs checks the records of the run's Out: executed once (every OK ID
// once, every run counter 1), never early (no delayed task started before
// its due time) and retried (every flaky task succeeded). A record that
// does not decode is a failed check of its own.
func (p *Plan) CheckOutputs(outs []*kgo.Record) []Check {
	var checks []Check
	seen := map[string]int{}
	inputs := map[string][]byte{}
	var early int
	var late []time.Duration
	runsAbove1 := 0
	for _, r := range outs {
		t, err := onceq.FromRecord(r)
		if err != nil {
			checks = append(checks, check(false, "decoding an output: %v", err))
			continue
		}
		seen[t.ID]++
		inputs[t.ID] = t.Input
		var due, started int64
		for _, h := range t.Headers {
			switch h.Key {
			case DueHeader:
				due, _ = strconv.ParseInt(string(h.Value), 10, 64)
			case handlers.StartedHeader:
				started, _ = strconv.ParseInt(string(h.Value), 10, 64)
			case handlers.RunsHeader:
				if string(h.Value) != "1" {
					runsAbove1++
				}
			}
		}
		if due > 0 {
			if lag := time.Duration(started-due) * time.Millisecond; started < due {
				early++
			} else {
				late = append(late, lag)
			}
		}
	}
	missing, dups := 0, 0
	for _, id := range p.OK {
		switch seen[id] {
		case 0:
			missing++
		case 1:
		default:
			dups++
		}
	}
	mix := p.Mix
	checks = append(checks, check(missing == 0 && dups == 0 && len(seen) == len(p.OK) && runsAbove1 == 0,
		"executed once: %d distinct task IDs in %s, %d duplicated, %d missing, %d per-ID run counters above 1 (%d resubmitted duplicates skipped)",
		len(seen), p.Names.Out, dups, missing, runsAbove1, mix.Duplicates))
	if mix.Delayed > 0 {
		slices.Sort(late)
		checks = append(checks, check(early == 0 && len(late) == mix.Delayed,
			"never early: %d delayed tasks, %d started before their due time; lateness (start - due) %s", len(late)+early, early, LatenessSummary(late)))
	}
	if mix.Flaky > 0 {
		n := 0
		for id := range seen {
			if strings.HasPrefix(id, "flaky-") {
				n++
			}
		}
		checks = append(checks, check(n == mix.Flaky, "retried: %d of %d tasks failed twice, then succeeded on their third attempt", n, mix.Flaky))
	}
	if mix.Chords+mix.Chains > 0 {
		checks = append(checks, p.checkWorkflows(inputs))
	}
	return checks
}

// checkWorkflows checks, from the outputs' inputs, that every chord's
// callback got all its members' results, each from a single run, and
// that every chain step got the result of the step before it.
func (p *Plan) checkWorkflows(inputs map[string][]byte) Check {
	ranOnce := func(result []byte) bool {
		var r struct{ Runs int }
		return json.Unmarshal(result, &r) == nil && r.Runs == 1
	}
	chords := 0
	for _, id := range p.Chords {
		results, err := workflow.Results(inputs[id+"/cb"])
		ok := err == nil && len(results) == p.Mix.ChordMembers
		for _, r := range results {
			ok = ok && ranOnce(r)
		}
		if ok {
			chords++
		}
	}
	chains := 0
	for _, id := range p.Chains {
		ok := true
		for s := 1; s < p.Mix.ChainSteps; s++ {
			ok = ok && ranOnce(inputs[fmt.Sprintf("%s/%d", id, s)])
		}
		if ok {
			chains++
		}
	}
	return check(chords == len(p.Chords) && chains == len(p.Chains),
		"workflows: %d of %d chords' callbacks ran once with all %d results; %d of %d chains of %d ran each step once, in order",
		chords, len(p.Chords), p.Mix.ChordMembers, chains, len(p.Chains), p.Mix.ChainSteps)
}

// CheckDeadLetters checks the records of the run's queue's dead-letter topic: every
// Dead ID there once, and nothing else.
func (p *Plan) CheckDeadLetters(dls []*kgo.Record) Check {
	reasons := map[string]int{}
	deadSeen := map[string]int{}
	var sample string
	for _, r := range dls {
		t, err := onceq.FromRecord(r)
		if err != nil {
			continue
		}
		deadSeen[t.ID]++
		reason, _, _ := strings.Cut(t.LastError, ":")
		reasons[reason]++
		sample = t.LastError
	}
	okDead := len(dls) == len(p.Dead)
	for _, id := range p.Dead {
		okDead = okDead && deadSeen[id] == 1
	}
	return check(okDead, "dead letters: %d in %s (want %d), by reason %v; e.g. %q", len(dls), broker.DLQTopic(p.Names.Queue), len(p.Dead), reasons, sample)
}

// LatenessSummary writes the p50, p99 and max of sorted lateness, or
// "n/a" when there is none.
func LatenessSummary(late []time.Duration) string {
	if len(late) == 0 {
		return "n/a"
	}
	q := func(f float64) time.Duration { return late[int(f*float64(len(late)-1))].Round(time.Millisecond) }
	return fmt.Sprintf("p50 %v, p99 %v, max %v", q(0.5), q(0.99), late[len(late)-1].Round(time.Millisecond))
}
