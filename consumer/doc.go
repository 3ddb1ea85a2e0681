// Package consumer runs onceq tasks in a Kafka consumer group, exactly
// once.
//
// A Worker joins a group, takes a share of the queues' partitions and runs
// a Handler for each task. Every commit interval it stops fetching, lets
// the tasks it fetched finish (the commit barrier), and commits in one
// Kafka transaction their outputs (tasks they emit), their changelog
// records (processed IDs and state writes) and the offsets past them,
// fenced by the group generation (KIP-447). Then, while the next records
// run, it writes the same to its Pebble checkpoint; until that write is
// durable, what it holds stays in memory, where deduplication and State
// find it. A task whose ID is already processed is acknowledged without
// running, so duplicates submitted with one ID run once.
//
// The barrier is there because a transaction commits the consumer's
// position: franz-go's GroupTransactSession commits everything polled, and
// turns marked (partial) commits off for transactional clients. Committing
// while a polled task still ran would lose that task on a crash. A slow
// task therefore delays its worker's commits; its time-to-run (the task's
// timeout or DefaultTimeout) bounds that.
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
//	err = w.Run(ctx) // until ctx is done; then drains, commits and leaves
//
// Ordering and concurrency: records with the same key run one at a time in
// offset order; different keys run concurrently, up to Concurrency.
// Processed IDs are kept per partition, and a task's key (its ID when it
// has none) picks its partition: submit an ID's duplicates with the same
// key. Within a partition, a duplicate runs once whatever its key.
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
// (onceq-changelog-<group>-<queue>), so no processed ID runs again.
//
// When the group rebalances between commits, the next commit aborts and
// the worker's uncommitted work (at most one commit interval's) runs again
// on the partitions' new owners: franz-go's GroupTransactSession favors
// aborting over committing across a rebalance, which is what keeps the
// guarantee when a member is slow.
package consumer
