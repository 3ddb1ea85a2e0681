package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
)

// The pull model, lmstfy's: a worker of the server's group runs each
// queue that HTTP consumers ask for, and its handler hands each task to
// a waiting consumer and finishes when the consumer acknowledges it
// (DELETE .../job/{id}), or fails it when its time-to-run passes: every
// guarantee of the worker holds (the task commits once, with its record;
// a task not acknowledged is retried with backoff, then dead-lettered),
// and a slow consumer holds only its own task.

// Defaults of the pull model.
const (
	// DefaultPullGroup is the consumer group of the server's workers.
	DefaultPullGroup = "onceq-serve"
	// DefaultPullSlots is how many tasks of a queue one server holds for
	// its consumers at once, handed out or waiting for one.
	DefaultPullSlots = 64
	// DefaultTTR is a consume's time-to-run when it gives none, lmstfy's.
	DefaultTTR = 2 * time.Minute
	// MaxCount bounds the tasks one consume asks for.
	MaxCount = 100
	// MaxConsumeQueues bounds the queues one consume names: each queue a
	// server is asked for runs a worker until the server stops.
	MaxConsumeQueues = 16
)

// holdMax bounds how long a worker's task waits for a consumer, plus its
// time-to-run: the worker's task timeout.
const holdMax = 24 * time.Hour

// errTTR fails a task not acknowledged within its time-to-run.
var errTTR = errors.New("not acknowledged within its time-to-run (ttr)")

// lease is a task a worker's handler offers to the HTTP consumers: the
// consumer that takes it sends its terms, and the handler answers once its
// take counted in the lease topic (lease.go), or did not.
type lease struct {
	task  *consumer.Task
	terms chan grant     // the consumer's terms, sent once it took it
	reply chan takeReply // the handler's answer
}

// grant is what a consumer took a task for: its time-to-run and whether
// the take spends one of the task's tries (lmstfy's freeze_tries).
type grant struct {
	ttr    time.Duration
	freeze bool
}

// takeReply says whether a take counted: its lease, or none (another take
// or an acknowledgment came first, or err).
type takeReply struct {
	lease string
	err   error
}

// puller runs one queue's worker and hands its tasks out.
type puller struct {
	pull   *pull // the leases it hands out are kept there
	topic  string
	offers chan *lease
	cancel context.CancelFunc
	done   chan struct{}
}

// pull holds the pullers and the leases handed out.
type pull struct {
	mu      sync.Mutex
	queues  map[string]*puller
	ledger  *ledger // the group's leases
	stopped bool
}

func leaseKey(topic, id string) string { return topic + "\x00" + id }

// puller returns the puller of topic, starting its worker the first
// time; nil for a queue that does not exist: a consume never creates
// one (nor its worker's topics), it finds no job there.
func (s *Server) puller(ctx context.Context, topic string) (*puller, error) {
	s.pull.mu.Lock()
	defer s.pull.mu.Unlock()
	if s.pull.stopped {
		return nil, errors.New("the server is stopping")
	}
	if p, ok := s.pull.queues[topic]; ok {
		return p, nil
	}
	if ok, err := s.queueExists(ctx, topic); !ok || err != nil {
		return nil, err
	}
	p := &puller{pull: &s.pull, topic: topic, offers: make(chan *lease), done: make(chan struct{})}
	opts := []consumer.Opt{consumer.Conn(s.cfg.conn), consumer.Logger(s.cfg.log), consumer.Queues(topic),
		consumer.Group(s.cfg.pullGroup), consumer.Concurrency(s.cfg.pullSlots), consumer.TaskTimeout(holdMax), consumer.CommitInterval(pullCommitInterval), consumer.ShutdownTimeout(pullShutdown),
		consumer.WithHandler(consumer.HandlerFunc(p.handle)), consumer.ResultRetention(s.cfg.retention),
		// One worker per registerer: each pulled queue's worker labels its
		// metrics with the queue.
		consumer.Registerer(prometheus.WrapRegistererWith(prometheus.Labels{"pull": topic}, s.cfg.reg))}
	if s.cfg.dataDir != "" {
		opts = append(opts, consumer.CheckpointDir(filepath.Join(s.cfg.dataDir, "pull", topic)))
	} else {
		opts = append(opts, consumer.CheckpointFS(vfs.NewMem()), consumer.CheckpointDir("pull/"+topic))
	}
	w, err := consumer.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("starting the worker of %s: %w", topic, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() {
		defer close(p.done)
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			s.cfg.log.Error("the worker of a pulled queue stopped", "queue", topic, "err", err)
		}
		s.pull.mu.Lock()
		if s.pull.queues[topic] == p {
			delete(s.pull.queues, topic) // the next consume starts another
		}
		s.pull.mu.Unlock()
	}()
	s.pull.queues[topic] = p
	return p, nil
}

// handle is the worker's handler: it offers the task to consumers, and
// once one took it, waits for its acknowledgment (from any server) or the
// end of its time-to-run. A run of a task that was handed out before (by
// a server that stopped, or lost the task's partition) finds its lease
// and does the same, without handing the task out again.
func (p *puller) handle(ctx context.Context, t *consumer.Task) error {
	lg := p.pull.ledger
	key := leaseKey(t.Queue, t.ID)
	// Every take written before this run started is known to it.
	if err := lg.barrier(ctx); err != nil {
		return runError(ctx, err)
	}
	for {
		st, ok, changed := lg.watch(key)
		var end bool
		var err error
		switch {
		case ok && st.Acked:
			lg.unwatch(key, changed)
			if len(st.Result) > 0 {
				return t.SetResult(st.Result)
			}
			return nil
		case ok && st.Taken:
			end, err = p.hold(ctx, key, st, changed)
		case ok && st.Expired && st.Partition == t.Partition && st.Offset == t.Offset:
			// This run's lease expired before a restart: the try is spent.
			lg.unwatch(key, changed)
			return ttrError(st)
		default:
			end, err = p.offer(ctx, t, key, changed)
		}
		if end {
			return err
		}
	}
}

// hold waits while the lease st is open: for a change of it, or for the
// end of its time-to-run, when it writes the lease's expiry. end says the
// run is over, with err.
func (p *puller) hold(ctx context.Context, key string, st leaseState, changed <-chan struct{}) (end bool, err error) {
	lg := p.pull.ledger
	timer := time.NewTimer(time.Until(st.Until))
	defer timer.Stop()
	select {
	case <-changed:
		return false, nil
	case <-ctx.Done():
		lg.unwatch(key, changed)
		return true, ctx.Err()
	case <-timer.C:
	}
	lg.unwatch(key, changed)
	counted, _, err := lg.write(ctx, key, leaseEvent{Kind: evExpire, Lease: st.Lease})
	switch {
	case err != nil:
		return true, runError(ctx, err)
	case !counted:
		return false, nil // acknowledged first
	}
	return true, ttrError(st)
}

// ttrError is how a run ends whose lease expired: failed, or snoozed when
// taken with freeze_tries (the run counts no attempt, and the task is
// offered again at once).
func ttrError(st leaseState) error {
	if st.Freeze {
		return consumer.Snooze(0, fmt.Sprintf("%v: %v (freeze_tries: no try spent)", errTTR, st.TTR))
	}
	return fmt.Errorf("%w: %v", errTTR, st.TTR)
}

// offer offers t to the server's consumers until one takes it, and writes
// the take. end says the run is over, with err.
func (p *puller) offer(ctx context.Context, t *consumer.Task, key string, changed <-chan struct{}) (end bool, err error) {
	lg := p.pull.ledger
	l := &lease{task: t, terms: make(chan grant, 1), reply: make(chan takeReply, 1)}
	select {
	case p.offers <- l:
	case <-changed:
		return false, nil // acknowledged or taken elsewhere meanwhile
	case <-ctx.Done():
		lg.unwatch(key, changed)
		return true, ctx.Err()
	}
	lg.unwatch(key, changed)
	var g grant
	select {
	case g = <-l.terms:
	case <-ctx.Done():
		l.reply <- takeReply{err: ctx.Err()}
		return true, ctx.Err()
	}
	counted, st, err := lg.write(ctx, key, leaseEvent{Kind: evTake, Partition: t.Partition, Offset: t.Offset,
		Until: time.Now().Add(g.ttr).UnixMilli(), TTR: g.ttr.Milliseconds(), Freeze: g.freeze})
	switch {
	case err != nil:
		l.reply <- takeReply{err: err}
		return true, runError(ctx, err)
	case !counted:
		l.reply <- takeReply{}
	default:
		l.reply <- takeReply{lease: st.Lease}
	}
	return false, nil // held now, or as another event left it
}

// runError is the error a run ends with when the lease topic cannot be
// reached: the context's, if it ended (the run is not counted), else err.
func runError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// stopPull stops every queue's worker; tasks handed out and not
// acknowledged are run again by the group.
func (s *Server) stopPull() {
	s.pull.mu.Lock()
	s.pull.stopped = true
	ps := make([]*puller, 0, len(s.pull.queues))
	for _, p := range s.pull.queues {
		ps = append(ps, p)
	}
	s.pull.mu.Unlock()
	for _, p := range ps {
		p.cancel()
	}
	for _, p := range ps {
		<-p.done
	}
}

// consume: GET /api/{ns}/{q1},{q2}...?ttr=&timeout=&count=: long-polls
// up to timeout seconds for tasks of the queues, the first queue first,
// and hands out at most count, each for ttr seconds.
func (s *Server) consume(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	q := r.URL.Query()
	names := strings.Split(r.PathValue("queue"), ",")
	if len(names) > MaxConsumeQueues {
		writeError(w, badRequest("queue", "%d queues: one consume names at most %d: consume the others in another request", len(names), MaxConsumeQueues))
		return
	}
	topics := make([]string, len(names))
	for i, n := range names {
		t, err := s.topicOf(ns, n)
		if err != nil {
			writeError(w, err)
			return
		}
		topics[i] = t
	}
	ttr, err := durationParam(q, "ttr", DefaultTTR, time.Second, holdMax/2)
	if err != nil {
		writeError(w, err)
		return
	}
	timeout, err := durationParam(q, "timeout", 0, 0, s.cfg.maxWait)
	if err != nil {
		writeError(w, err)
		return
	}
	count := 1
	if v := q.Get("count"); v != "" {
		if count, err = strconv.Atoi(v); err != nil || count < 1 || count > MaxCount {
			writeError(w, badRequest("count", "%q: want a number of tasks from 1 to %d", v, MaxCount))
			return
		}
	}
	freeze, err := boolParam(q, "freeze_tries")
	if err != nil {
		writeError(w, err)
		return
	}
	pullers := make([]*puller, 0, len(topics))
	for _, t := range topics {
		p, err := s.puller(r.Context(), t)
		if err != nil {
			writeError(w, err)
			return
		}
		if p != nil { // a queue that does not exist has no job
			pullers = append(pullers, p)
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	out := s.takeJobs(ctx, ns, pullers, count, grant{ttr: ttr, freeze: freeze})
	if len(out) == 0 {
		writeJSON(w, http.StatusNotFound, map[string]string{"msg": "no job available"})
		return
	}
	if count == 1 {
		writeJSON(w, http.StatusOK, out[0]) // lmstfy: one object unless count > 1
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// takeJobs takes up to count tasks offered by pullers on g's terms: the
// first waits until ctx ends, the rest are taken if they are offered
// already. A task is the consumer's once its take counted.
func (s *Server) takeJobs(ctx context.Context, ns string, pullers []*puller, count int, g grant) []lmstfyJob {
	var out []lmstfyJob
	for len(out) < count {
		var offered []*lease
		if l := take(ctx, pullers, len(out) == 0); l != nil {
			offered = append(offered, l)
			for len(out)+len(offered) < count {
				l := take(ctx, pullers, false)
				if l == nil {
					break
				}
				offered = append(offered, l)
			}
		}
		if len(offered) == 0 {
			break
		}
		for _, l := range offered {
			l.terms <- g
		}
		now := time.Now()
		for _, l := range offered {
			rep := <-l.reply
			if rep.err != nil {
				s.cfg.log.Warn("a take was not written to the lease topic: the task is offered again", "queue", l.task.Queue, "id", l.task.ID, "err", rep.err)
			}
			if rep.lease == "" {
				continue
			}
			j := lmstfyJobOf(ns, &l.task.Task, now, !g.freeze)
			j.Msg, j.TTR, j.Lease = "new job", int64(g.ttr/time.Second), rep.lease
			out = append(out, j)
		}
	}
	return out
}

// take returns a task offered by the first puller that has one: at once,
// or, when wait, as soon as one does before ctx ends; nil if none.
func take(ctx context.Context, ps []*puller, wait bool) *lease {
	for _, p := range ps {
		select {
		case l := <-p.offers:
			return l
		default:
		}
	}
	if !wait {
		return nil
	}
	cases := make([]reflect.SelectCase, 0, len(ps)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	for _, p := range ps {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.offers)})
	}
	i, v, _ := reflect.Select(cases)
	if i == 0 {
		return nil
	}
	return v.Interface().(*lease)
}

// durationParam reads seconds (or a Go duration) from q[name], def when
// absent, within [lo, hi].
func durationParam(q map[string][]string, name string, def, lo, hi time.Duration) (time.Duration, error) {
	v := ""
	if vs := q[name]; len(vs) > 0 {
		v = vs[0]
	}
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(seconds(v))
	if err != nil || d < lo || d > hi {
		return 0, badRequest(name, "%q: want seconds (or a duration such as 90s) from %v to %v", v, lo, hi)
	}
	return d, nil
}

// ackCommitWait bounds how long an acknowledgment waits for its commit.
const ackCommitWait = 30 * time.Second

// pullCommitInterval is the commit interval of the pulled queues'
// workers: an acknowledgment answers once its commit is visible, so it
// waits for the next commit. A worker with nothing finished does not
// commit, so an idle queue costs no transactions.
const pullCommitInterval = time.Millisecond

// pullShutdown is how long a stopping server's workers wait for their
// handlers: they wait for consumers, not work, so their tasks are
// abandoned (and run again, at the same attempt) at once.
const pullShutdown = time.Second

// queueExists reports whether topic exists.
func (s *Server) queueExists(ctx context.Context, topic string) (bool, error) {
	adm, err := broker.NewAdmin(s.cfg.conn)
	if err != nil {
		return false, err
	}
	defer adm.Close()
	_, err = adm.DescribeTopic(ctx, topic)
	if errors.Is(err, broker.ErrTopicNotFound) {
		return false, nil
	}
	return err == nil, err
}

// ensureQueue creates a queue that does not exist, with CreateQueues
// partitions, or refuses it with CreateQueues(0).
func (s *Server) ensureQueue(ctx context.Context, topic string) error {
	adm, err := broker.NewAdmin(s.cfg.conn)
	if err != nil {
		return err
	}
	defer adm.Close()
	_, err = adm.DescribeTopic(ctx, topic)
	switch {
	case errors.Is(err, broker.ErrTopicNotFound) && s.cfg.partitions == 0:
		return &apiError{status: http.StatusNotFound, field: "queue", msg: fmt.Sprintf("queue %s does not exist and this server does not create queues (--no-create-queues)", topic)}
	case errors.Is(err, broker.ErrTopicNotFound):
		return adm.EnsureTopic(ctx, topic, s.cfg.partitions, nil)
	}
	return err
}
