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

	"github.com/onceq/onceq"
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

// lease is a task handed from a worker's handler to an HTTP consumer.
type lease struct {
	task  *consumer.Task
	ttr   chan grant    // the consumer's terms, sent once it took it
	acked chan []byte   // the result the consumer acknowledged with
	over  chan struct{} // closed when the handler returns
	taken time.Time
}

// grant is what a consumer took a task for: its time-to-run and whether
// the take spends one of the task's tries (lmstfy's freeze_tries).
type grant struct {
	ttr    time.Duration
	freeze bool
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
	leases  map[string]*lease // by topic + "\x00" + ID
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

// handle is the worker's handler: it offers the task to consumers and
// waits for the one that took it to acknowledge it.
func (p *puller) handle(ctx context.Context, t *consumer.Task) error {
	l := &lease{task: t, ttr: make(chan grant, 1), acked: make(chan []byte), over: make(chan struct{})}
	defer func() {
		close(l.over)
		p.pull.forget(l) // acknowledged, past its ttr, or abandoned
	}()
	select {
	case p.offers <- l:
	case <-ctx.Done():
		return ctx.Err()
	}
	var g grant
	select {
	case g = <-l.ttr:
	case <-ctx.Done():
		return ctx.Err()
	}
	timer := time.NewTimer(g.ttr)
	defer timer.Stop()
	select {
	case result := <-l.acked:
		if len(result) > 0 {
			return t.SetResult(result)
		}
		return nil
	case <-timer.C:
		if g.freeze {
			// Taken with freeze_tries: the run counts no attempt, and the
			// task is offered again at once.
			return consumer.Snooze(0, fmt.Sprintf("%v: %v (freeze_tries: no try spent)", errTTR, g.ttr))
		}
		return fmt.Errorf("%w: %v", errTTR, g.ttr)
	case <-ctx.Done():
		return ctx.Err()
	}
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
	var got []*lease
	// The first task waits up to the timeout; the rest are taken only if
	// they are there already.
	if l := take(ctx, pullers, true); l != nil {
		got = append(got, l)
		for len(got) < count {
			l := take(ctx, pullers, false)
			if l == nil {
				break
			}
			got = append(got, l)
		}
	}
	if len(got) == 0 {
		writeJSON(w, http.StatusNotFound, map[string]string{"msg": "no job available"})
		return
	}
	now := time.Now()
	out := make([]lmstfyJob, len(got))
	s.pull.mu.Lock()
	for i, l := range got {
		l.taken = now
		t := l.task
		s.pull.leases[leaseKey(t.Queue, t.ID)] = l
		out[i] = lmstfyJobOf(ns, &t.Task, now, !freeze)
		out[i].Msg, out[i].TTR = "new job", int64(ttr/time.Second)
	}
	s.pull.mu.Unlock()
	for _, l := range got {
		l.ttr <- grant{ttr: ttr, freeze: freeze}
	}
	if count == 1 {
		writeJSON(w, http.StatusOK, out[0]) // lmstfy: one object unless count > 1
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// forget drops a lease whose handler returned, unless another run of the
// task holds its key by now.
func (pl *pull) forget(l *lease) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	k := leaseKey(l.task.Queue, l.task.ID)
	if pl.leases[k] == l {
		delete(pl.leases, k)
	}
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

// leaseOf returns the lease of a task this server handed out, or nil.
func (s *Server) leaseOf(topic, id string) *lease {
	s.pull.mu.Lock()
	defer s.pull.mu.Unlock()
	return s.pull.leases[leaseKey(topic, id)]
}

// acknowledge finishes a task handed out with result, and returns once
// its commit is visible: nil, or the error to answer.
func (s *Server) acknowledge(ctx context.Context, l *lease, topic, id string, result []byte) error {
	select {
	case l.acked <- result:
	case <-l.over:
		return &apiError{status: http.StatusConflict, msg: "the task's time-to-run passed before the acknowledgment: it runs again (or is dead-lettered after its tries)"}
	}
	ctx, cancel := context.WithTimeout(ctx, ackCommitWait)
	defer cancel()
	// This run's record: a requeued task's earlier run left a final
	// record of its own.
	rec, err := s.in.WaitFor(ctx, topic, id, func(r onceq.TaskRecord) bool {
		return r.Partition == l.task.Partition && r.Offset == l.task.Offset
	})
	switch {
	case err != nil:
		return &apiError{status: http.StatusGatewayTimeout, msg: fmt.Sprintf("acknowledged, but its commit is not visible after %v: ask GET .../job/%s", ackCommitWait, id)}
	case rec.State != onceq.StateSucceeded:
		return &apiError{status: http.StatusConflict, msg: fmt.Sprintf("the task ended %s: %s (its time-to-run passed before the acknowledgment, or the result was refused)", rec.State, rec.Error)}
	}
	return nil
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
