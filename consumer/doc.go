// Package consumer runs onceq tasks in a Kafka consumer group, exactly
// once.
//
// A Worker joins a group, takes a share of the queues' partitions and runs
// a Handler for each task. Every commit interval it commits, in one Kafka
// transaction, what has finished: the finished tasks' outputs (tasks they
// emit, retries, dead letters), their changelog records (processed IDs and
// state writes) and, per partition, the offset of its first unfinished
// record, fenced by the group generation (KIP-447). Tasks still running
// go on: a slow task holds its own slot, never the commit. Then, while the
// next records run, it writes the same to its Pebble checkpoint; until
// that write is durable, what it holds stays in memory, where
// deduplication and State find it. A task whose ID is already processed is
// acknowledged without running, so duplicates submitted with one ID run
// once.
//
// Tasks that finished above their partition's committed offset (behind a
// slow one) are listed, as ranges of offsets, in the same transaction as
// their outputs: after a crash or a move, the partition's next owner
// fetches them again from the committed offset and acknowledges them
// without running them. Processed-ID marks are kept only for idempotency
// keys, the IDs a client chose (onceq.Task.IdempotencyKey): the rest reach
// the queue once. franz-go's GroupTransactSession would commit
// the position of everything polled; the worker keeps the session (it
// aborts a transaction across a revocation, which is what keeps the
// guarantee when a member is slow) and rewrites the offsets of its
// TxnOffsetCommit to the first unfinished records.
//
//	h := consumer.HandlerFunc(func(ctx context.Context, t *consumer.Task) error {
//		n, err := t.State().Counter([]byte("sent/"+t.ID), 1)
//		if err != nil {
//			return err
//		}
//		return t.Emit(onceq.Task{Queue: "receipts", Payload: []byte(strconv.FormatInt(n, 10))})
//	})
//	w, err := consumer.New(
//		consumer.Conn(broker.Conn{Brokers: []string{"127.0.0.1:9092"}}),
//		consumer.Group("mailer"),
//		consumer.Queues("emails"),
//		consumer.CheckpointDir("/var/lib/onceq/mailer"),
//		consumer.WithHandler(h),
//	)
//	if err != nil { ... }
//	err = w.Run(ctx) // until ctx is done; then lets running tasks finish, commits and leaves
//
// Handlers compose: Chain wraps one in Middleware; a Mux routes each task
// to the Handler of its queue (a queue with none fails with SkipRetry);
// JSON decodes the payload into a typed value once, before the handler
// runs, and sends a payload that does not decode to the dead letters:
//
//	mux := consumer.NewMux()
//	mux.Route("emails", consumer.JSON(func(ctx context.Context, t *consumer.Task, e Email) error {
//		return send(ctx, t.ID, e.To)
//	}))
//
// Package consumer/consumertest runs a handler in a unit test, without a
// broker, through the code a worker runs for one attempt (time-to-run,
// panic recovery, retry or dead letter, workflow continuation), and
// reports what the worker would commit.
//
// Ordering and concurrency: records with the same key run one at a time in
// offset order; different keys run concurrently, up to Concurrency, and a
// record waits only for the earlier records of its own key (records
// without a key wait for none). Processed IDs are kept per partition, and
// a task's key (its ID when it has none) picks its partition: submit an
// ID's duplicates with the same key. Within a partition, a duplicate runs
// once whatever its key: records of one ID run one at a time too.
//
// MaxRunningPerQueue bounds the tasks of one queue running at once: a
// task of a queue at its bound waits, in its key order, without taking a
// slot, and the other queues' tasks start on the free slots. The queue's
// waiting tasks take its places highest priority first, then oldest
// first (by their records' timestamps), whichever partition each came
// from. A worker
// whose handlers wait long on some queues (onceq serve's wait for their
// HTTP consumers) keeps the others going.
//
// Fetching on demand: with OnDemand(true) the worker fetches a queue's
// partitions only while the queue is wanted, and Worker.Want(queue,
// until) wants it until a time. The first Want of a queue resumes its
// partitions at once; a Want while the queue is wanted costs no
// allocation and no request, so it can be called on every request of a
// pull API. Worker.Owns says whether the worker owns a partition of a
// queue now:
//
//	if w.Owns(queue) {
//		w.Want(queue, time.Now().Add(wait))
//		// ... the handler hands the queue's next task to this request
//	}
//
// Long tasks: a task may run as long as its time-to-run (onceq-timeout, or
// TaskTimeout) allows. Its context is canceled at that deadline; the
// worker's commits, transactions and group heartbeats go on meanwhile.
//
// Cancels: a task canceled in the control topic (control.Cancel, onceq
// task cancel) ends canceled instead of running; one running when the
// cancel comes has its context canceled, and ends canceled if its handler
// returns an error, or as it returns if it finishes all the same. Either
// way the worker removes the cancel in the transaction of the outcome.
//
// Shutdown: when Run's context is done the worker starts no more tasks,
// gives the running ones ShutdownTimeout to finish while it goes on
// committing, then cancels their contexts, commits what finished and
// leaves the group. A canceled task's result is dropped, so it runs again,
// once, on its partition's next owner; Run then returns ErrTasksCanceled.
//
// Effects that go through onceq (state writes, emitted tasks, the offset)
// commit together or not at all, across crashes, restarts and rebalances.
// Effects outside (an e-mail, an HTTP call) are at-least-once by nature:
// use Task.ID as their idempotency key.
//
// Each worker needs its own CheckpointDir. It holds the worker's instance
// ID, from which its transactional ID and static group membership derive:
// a restarted worker fences its predecessor's open transaction at once and
// takes back its partitions without a rebalance. A partition that arrives
// from another worker is first caught up from its changelog topic
// (onceq-checkpoint-<length of group>-<group>-<queue>, see
// broker.ChangelogTopic), so no processed ID runs again.
//
// When the group rebalances, a revoked partition is released at once: its
// running handlers are canceled, whatever they finish is dropped, and the
// commit in progress aborts. The partition's next owner runs its
// unfinished tasks from the committed offset. The partitions the worker
// keeps lose nothing: an aborted commit's finished results are taken by
// the next commit.
package consumer
