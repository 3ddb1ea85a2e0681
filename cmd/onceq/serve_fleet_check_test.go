package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/testutil"
)

// fleetTally is what check counted of a run: the figures it reports.
type fleetTally struct {
	lost, canceled, crossTalk int
	// twice: handed out while the lease of a consumer that went on to
	// acknowledge it ran; early: back before the ttr of a hand-out that
	// was abandoned; afterAck: handed out after an ACK answered 204 or
	// 202; notBack: abandoned, and not handed out again.
	twice, early, afterAck, notBack int
	// late ACKs by answer, abandoned hand-outs, hand-outs, and ACKs in
	// time answered 202 (the run they wait for did not commit in time).
	late      map[int]int
	abandoned int
	handouts  int
	inTime202 int
	// firstLater: jobs first handed out (as a consumer saw it) at an
	// attempt past 1.
	firstLater int
	// records per job in the queue topics, sorted.
	records []int
	// overRecords: jobs with more records than their bound.
	overRecords int
	// slowLate: late ACKs answered after fleetLateMax.
	slowLate int
}

// check reads what the run left in the topics and checks every job
// against its hand-outs, then logs the run's figures.
func (f *fleet) check() {
	t := f.t
	finals, last := f.readTaskRecords()
	inQueue := f.readQueueRecords()
	tl := fleetTally{late: map[int]int{}}
	report := func(n *int, format string, args ...any) {
		*n++
		if *n <= 5 {
			t.Errorf(format, args...)
		}
	}
	var wrong int // reported beyond lost and the rest
	for _, j := range f.jobs {
		hs := f.handouts[j]
		slices.SortFunc(hs, func(a, b *handout) int { return a.received.Compare(b.received) })
		acked := map[string]bool{} // the results of the ACKs answered 202 or 204
		var counted []*handout
		for _, h := range hs {
			tl.handouts++
			switch {
			case h.late():
				tl.late[h.code]++
			case h.does == abandon:
				tl.abandoned++
			case h.code == 202:
				tl.inTime202++
			}
			if h.code == 202 || h.code == 204 {
				acked[h.result] = true
			}
			if h.counted() {
				counted = append(counted, h)
			}
		}
		rec, ok := last[j]
		switch {
		case !ok || rec.State != onceq.StateSucceeded:
			if rec.State == onceq.StateCanceled {
				tl.canceled++
			}
			report(&tl.lost, "%s: record %+v (found %v); want succeeded", j, rec, ok)
		case finals[j] != 1:
			report(&wrong, "%s has %d final records; want 1", j, finals[j])
		case !strings.HasPrefix(string(rec.Result), "r-"+j.String()+"@"):
			report(&tl.crossTalk, "%s succeeded with %q: another job's result", j, rec.Result)
		case !acked[string(rec.Result)]:
			report(&wrong, "%s succeeded with %q: no ACK of it answered 204 or 202", j, rec.Result)
		case len(counted) > 1:
			report(&wrong, "%s: %d ACKs counted (%q answered %d, %q answered %d); want one", j, len(counted),
				counted[0].result, counted[0].code, counted[1].result, counted[1].code)
		case len(counted) == 1 && string(rec.Result) != counted[0].result:
			report(&wrong, "%s succeeded with %q; want %q, whose ACK answered %d", j, rec.Result, counted[0].result, counted[0].code)
		}
		f.checkHandouts(j, hs, &tl, report)
		// Each hand-out not acknowledged in time may leave a retry's
		// record; a job no consumer asked for goes back once.
		bound := 2
		for _, h := range hs {
			if h.code != 204 || h.late() {
				bound++
			}
		}
		if len(hs) > 0 {
			if hs[0].attempt > 1 {
				if tl.firstLater++; tl.firstLater <= 3 {
					t.Logf("%s first handed out at attempt %d: hand-outs %s; records %s", j, hs[0].attempt, describeHandouts(hs), strings.Join(inQueue[j], "; "))
				}
			}
			bound += max(hs[0].attempt-1, 0)
		}
		n := len(inQueue[j])
		tl.records = append(tl.records, n)
		if n > bound {
			report(&tl.overRecords, "%s: %d records in its queue; want at most %d (2, and one for each hand-out not acknowledged in time): %s; hand-outs %s",
				j, n, bound, strings.Join(inQueue[j], "; "), describeHandouts(hs))
		}
	}
	if lost := f.lostAnswers.Load(); int64(tl.firstLater) > lost {
		t.Errorf("%d jobs first handed out at an attempt past 1, more than the %d consumes whose answer was lost (a take no consumer got)",
			tl.firstLater, lost)
	}
	var lateAnswers []time.Duration
	for _, j := range f.jobs {
		for _, h := range f.handouts[j] {
			if !h.late() || h.code == 0 {
				continue
			}
			d := h.answered.Sub(h.sent)
			lateAnswers = append(lateAnswers, d)
			if d > fleetLateMax {
				report(&tl.slowLate, "%s: a late ACK (consumer %d, lease %s, ttr %v, sent at %v, %v after the job was received) answered %d in %v; want within %v",
					j, h.consumer, h.lease, h.ttr, h.sent.Format(time.StampMilli), h.sent.Sub(h.received).Round(time.Millisecond), h.code, d.Round(time.Millisecond), fleetLateMax)
			}
		}
	}
	slices.Sort(lateAnswers)
	if p99 := quantile(lateAnswers, 0.99); p99 > fleetLateAnswer {
		t.Errorf("late ACKs answered in p99 %v (%d of them); want within %v", p99, len(lateAnswers), fleetLateAnswer)
	}
	inTime, afterKill := f.ackAnswers()
	// An ACK after a kill answers as fast, wherever its job ran: on the
	// killed server (a probe it does not answer), on the survivor, or on
	// the survivor before a rebalance moved the run away.
	if p99 := quantile(afterKill, 0.99); p99 > fleetLateAnswer {
		t.Errorf("ACKs in time sent within %v after a kill answered in p99 %v (%d of them); want within %v", fleetAfterKill, p99, len(afterKill), fleetLateAnswer)
	}
	if slowest := quantile(afterKill, 1); slowest > fleetLateMax {
		t.Errorf("an ACK in time sent within %v after a kill answered in %v; want within %v (the slowest are logged above)", fleetAfterKill, slowest, fleetLateMax)
	}
	if f.kills != fleetKills {
		t.Errorf("%d kills; want %d", f.kills, fleetKills)
	}
	slices.Sort(tl.records)
	t.Logf("%s: %d jobs (%d namespaces x %d queues x %d, the same IDs), 2 servers, %d kills, in %v: "+
		"%d lost, %d canceled, %d with another job's result, %d held by two at once, %d back before their ttr, %d abandoned and not back, %d handed out after their ACK; "+
		"%d hand-outs, %d abandoned, %d ACKs in time answered 202, %d late ACKs (202: %d, 204: %d, 409: %d), answered p50 %v, p99 %v, max %v; "+
		"ACKs in time answered p50 %v, p99 %v, max %v; of them sent within %v after a kill, %d: p50 %v, p99 %v, max %v, %d after more than %v; "+
		"records per job in the queues: median %d, max %d (%d over their bound); %d jobs first handed out at an attempt past 1 (%d consumes' answers lost)",
		f.layout.name, len(f.jobs), len(fleetNamespaces), len(fleetQueueNames), f.perQueue, f.kills, f.wall.Round(time.Second),
		tl.lost, tl.canceled, tl.crossTalk, tl.twice, tl.early, tl.notBack, tl.afterAck,
		tl.handouts, tl.abandoned, tl.inTime202, len(lateAnswers), tl.late[202], tl.late[204], tl.late[409],
		quantile(lateAnswers, 0.50), quantile(lateAnswers, 0.99), quantile(lateAnswers, 1),
		quantile(inTime, 0.50), quantile(inTime, 0.99), quantile(inTime, 1), fleetAfterKill, len(afterKill),
		quantile(afterKill, 0.50), quantile(afterKill, 0.99), quantile(afterKill, 1),
		len(afterKill)-slices.IndexFunc(append(afterKill, fleetLateAnswer+1), func(d time.Duration) bool { return d > fleetLateAnswer }), fleetLateAnswer,
		tl.records[len(tl.records)/2], tl.records[len(tl.records)-1], tl.overRecords, tl.firstLater, f.lostAnswers.Load())
}

// fleetAfterKill is how long after a kill an ACK counts as sent after
// it: past the pull group's session timeout, the killed server's
// partitions have moved. Those ACKs answer within fleetLateAnswer at
// their p99 and fleetLateMax each, as the late ones: an ACK of a run the
// killed server held answers within about 750 ms
// (TestServeAckAfterRunnerKilled), and so does one of a run its own
// server lost to a rebalance.
const fleetAfterKill = 15 * time.Second

// ackAnswers returns how long the ACKs in time took to answer, sorted:
// all of them, and those sent within fleetAfterKill after a kill. It logs
// the slowest of the latter.
func (f *fleet) ackAnswers() (all, afterKill []time.Duration) {
	type slow struct {
		j fleetJob
		h *handout
		d time.Duration
	}
	var slowest []slow
	for _, j := range f.jobs {
		for _, h := range f.handouts[j] {
			if h.late() || h.code == 0 {
				continue
			}
			d := h.answered.Sub(h.sent)
			all = append(all, d)
			if slices.ContainsFunc(f.killedAt, func(k time.Time) bool { return !h.sent.Before(k) && h.sent.Sub(k) < fleetAfterKill }) {
				afterKill = append(afterKill, d)
				slowest = append(slowest, slow{j, h, d})
			}
		}
	}
	slices.Sort(all)
	slices.Sort(afterKill)
	slices.SortFunc(slowest, func(a, b slow) int { return cmp.Compare(b.d, a.d) })
	for _, s := range slowest[:min(3, len(slowest))] {
		f.t.Logf("a slow ACK after a kill: %s (consumer %d, attempt %d) sent at %v, answered %d in %v", s.j, s.h.consumer, s.h.attempt,
			s.h.sent.Format(time.StampMilli), s.h.code, s.d.Round(time.Millisecond))
	}
	return all, afterKill
}

// checkHandouts checks a job's hand-outs, in the order consumers got
// them: none after an ACK of an earlier one answered 204 or 202, none
// within the ttr of an earlier one, and none abandoned last.
func (f *fleet) checkHandouts(j fleetJob, hs []*handout, tl *fleetTally, report func(*int, string, ...any)) {
	if n := len(hs); n > 0 && hs[n-1].does == abandon {
		report(&tl.notBack, "%s: abandoned by consumer %d at %v, and never handed out again", j, hs[n-1].consumer, hs[n-1].received.Format(time.StampMilli))
	}
	for k, h := range hs {
		for _, prev := range hs[:k] {
			switch {
			case (prev.code == 204 || prev.code == 202) && h.received.After(prev.answered):
				report(&tl.afterAck, "%s handed out to consumer %d after consumer %d's ACK answered %d", j, h.consumer, prev.consumer, prev.code)
			case h.received.Before(prev.asked.Add(prev.ttr)) && prev.does == abandon:
				report(&tl.early, "%s handed out to consumer %d at %v, within the ttr of consumer %d, which abandoned it (asked %v, ttr %v)",
					j, h.consumer, h.received.Format(time.StampMilli), prev.consumer, prev.asked.Format(time.StampMilli), prev.ttr)
			case h.received.Before(prev.asked.Add(prev.ttr)):
				report(&tl.twice, "%s handed out to consumer %d at %v, within consumer %d's lease (asked %v, ttr %v)", j, h.consumer,
					h.received.Format(time.StampMilli), prev.consumer, prev.asked.Format(time.StampMilli), prev.ttr)
			default:
				continue
			}
			break // one error for each hand-out
		}
	}
}

// jobOfQueue returns the job of queue (as records name it) and id.
func (f *fleet) jobOfQueue() func(queue, id string) (fleetJob, bool) {
	queues := map[string][2]string{}
	for _, ns := range fleetNamespaces {
		for _, q := range fleetQueueNames {
			queues[f.layout.queue(ns, q)] = [2]string{ns, q}
		}
	}
	return func(queue, id string) (fleetJob, bool) {
		q, ok := queues[queue]
		return fleetJob{q[0], q[1], id}, ok
	}
}

// topics returns the distinct topics name gives of each queue.
func (f *fleet) topics(name func(queue string) string) []string {
	var out []string
	for _, ns := range fleetNamespaces {
		for _, q := range fleetQueueNames {
			if tp := name(f.layout.queue(ns, q)); !slices.Contains(out, tp) {
				out = append(out, tp)
			}
		}
	}
	return out
}

// readTaskRecords reads the queues' task records: each job's final
// records counted, and its last record, the final one if it has one. A
// job's records may sit in several partitions (the producer's pending
// one, the workers').
func (f *fleet) readTaskRecords() (finals map[fleetJob]int, last map[fleetJob]onceq.TaskRecord) {
	t := f.t
	jobOf := f.jobOfQueue()
	finals, last = map[fleetJob]int{}, map[fleetJob]onceq.TaskRecord{}
	for _, r := range testutil.ReadCommitted(t, f.conn, 60*time.Second, f.topics(broker.RecordsTopic)...) {
		recs, err := onceq.DecodeTaskRecords(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			j, ok := jobOf(rec.Queue, rec.ID)
			if !ok {
				t.Errorf("a task record of queue %q, not one of the run's: %+v", rec.Queue, rec)
				continue
			}
			if rec.State.Final() {
				finals[j]++
			}
			if old, ok := last[j]; !ok || !old.State.Final() {
				last[j] = rec
			}
		}
	}
	return finals, last
}

// readQueueRecords returns the records of each job in the queues' topics
// (the lane's), as a read_committed reader sees them, each described.
func (f *fleet) readQueueRecords() map[fleetJob][]string {
	t := f.t
	jobOf := f.jobOfQueue()
	out := map[fleetJob][]string{}
	for _, r := range testutil.ReadCommitted(t, f.conn, 60*time.Second, f.topics(onceq.QueueTopic)...) {
		task, err := onceq.FromRecord(r)
		if err != nil {
			t.Fatalf("%s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		j, ok := jobOf(task.Queue, task.ID)
		if !ok {
			t.Errorf("%s/%d@%d: a task of queue %q, not one of the run's", r.Topic, r.Partition, r.Offset, task.Queue)
			continue
		}
		out[j] = append(out[j], describeRecord(r))
	}
	return out
}

// describeRecord describes a queue's record: where it is, when it was
// written, and its onceq headers but the ID and queue.
func describeRecord(r *kgo.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d@%d at %s", r.Partition, r.Offset, r.Timestamp.Format(time.StampMilli))
	for _, h := range r.Headers {
		if h.Key != onceq.HeaderID && h.Key != onceq.HeaderQueue && strings.HasPrefix(h.Key, onceq.HeaderPrefix) {
			fmt.Fprintf(&b, " %s=%s", strings.TrimPrefix(h.Key, onceq.HeaderPrefix), h.Value)
		}
	}
	return b.String()
}

// describeHandouts describes a job's hand-outs.
func describeHandouts(hs []*handout) string {
	var out []string
	for _, h := range hs {
		out = append(out, fmt.Sprintf("consumer %d at %s attempt %d ttr %v ACK %d", h.consumer, h.received.Format(time.StampMilli), h.attempt, h.ttr, h.code))
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// quantile returns the q quantile of sorted ds, 0 if empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(int(q*float64(len(ds))), len(ds)-1)].Round(time.Millisecond)
}
