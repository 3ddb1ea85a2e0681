// Package producer submits onceq tasks to Kafka: once or refused.
//
// A Producer writes each task as a plain Kafka record (see package onceq
// for the wire format) with acks=all and an idempotent client, so the
// client's own retries never duplicate a task. Tasks without an ID get a
// time-ordered UUIDv7; duplicates of one ID run once.
//
//	p, err := producer.New(producer.Brokers("127.0.0.1:9092"))
//	if err != nil { ... }
//	defer p.Close()
//
//	// Returns once the brokers acknowledged the task.
//	rc, err := p.Submit(ctx, onceq.Task{Queue: "emails", Payload: body})
//
//	// Returns at once; fn runs when the brokers answer.
//	p.SubmitAsync(ctx, task, func(rc producer.Receipt, err error) { ... })
//	// Many at once; fn gets each task's index in tasks.
//	p.SubmitMany(ctx, tasks, func(i int, rc producer.Receipt, err error) { ... })
//	err = p.Flush(ctx)
//
//	// All or nothing, for read_committed consumers such as onceq's workers.
//	err = p.Tx(ctx, func(tx *producer.Tx) error {
//		if err := tx.Submit(charge); err != nil {
//			return err
//		}
//		return tx.Submit(receipt)
//	})
//
// # Checks
//
// Every task is validated before anything is sent (queue name, ID, times,
// headers, size); errors wrap the onceq error kinds, so
// errors.Is(err, onceq.ErrInvalidQueue) works. A queue must exist: by
// default a task for a missing queue is refused with ErrQueueNotFound and
// the command that creates it; CreateQueues creates missing queues
// instead. Whether a topic exists is looked up once per producer and then
// cached.
//
// # Delays
//
// A task with a Delay or a future Due goes to a delay bucket topic chosen
// by the delay planner (default ladder 1s 5s 30s 2m 10m 1h 6h 1d), with
// onceq-queue and onceq-due headers; the delay service moves it on and
// publishes it to its queue when due, never early. A task due within less
// than the smallest bucket goes to the smallest bucket, never straight to
// its queue. Bucket topics are onceq's own and are created when missing.
//
// # Throughput
//
// SubmitAsync is the fast path: no goroutine per task, one allocation
// per task for its record and its acknowledgment, one cached topic
// lookup, a millisecond clock shared by the producer's submissions,
// admission control bounded by MaxBufferedRecords, and franz-go's
// batching underneath. Its callback runs on the client's callback
// goroutine and must not block. A task, once buffered, is not canceled by
// its caller's context, so that one canceled request cannot fail the
// other callers' tasks batched with it. SubmitMany submits a slice of
// tasks the same way with one callback, taking admission slots and
// reading the clock once per call. BenchmarkSubmitAsync compares both
// with raw franz-go producing the same records.
//
// # Transactions
//
// Tx uses a separate transactional client, created by the first Tx, and
// runs one transaction at a time per producer. fn's error, a refused task,
// a canceled context or a panic aborts; a crash leaves the broker to abort
// after TxTimeout, or a producer restarted with the same TransactionalID
// fences the open transaction at once.
//
// A commit is only reported when it happened. franz-go has a race in which
// EndTransaction, asked to commit a transaction whose only writes went to
// queues new to the client, aborts instead and returns nil (see
// broker.TxLogger); Tx notices, runs fn again in a new transaction on a new
// client (at most three runs), and returns ErrTxAborted if every run
// aborted. A write a broker refuses as out of sequence
// (OUT_OF_ORDER_SEQUENCE_NUMBER) is handled the same way. fn must therefore
// be safe to run again: submitting tasks is.
//
// # Metrics
//
// With Registerer set: onceq_tasks_submitted_total{queue},
// onceq_submit_errors_total{queue,reason} (reason invalid, no_queue,
// canceled, closed, broker or aborted) and
// onceq_submit_duration_seconds{queue}, the time from submission to
// acknowledgment of a queue's first task and every 16th after it (for
// SubmitMany, of a call's first task and every 16th after it): a sample,
// which keeps the acknowledgment path cheap.
//
// # Command line
//
// onceq produce maps its flags onto these options: one task from flags, or
// many from a JSON lines file, optionally in one transaction (--tx). Run
// "onceq produce --help".
package producer
