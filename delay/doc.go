// Package delay delays tasks by any amount on stock Kafka, without a topic
// per delay and without holding waiting tasks in memory.
//
// # The ladder
//
// A delayed task waits in bucket topics of a fixed ladder (default 1s 5s
// 30s 2m 10m 1h 6h 1d; topics onceq-delay-1s ... onceq-delay-1d) shared by
// all queues. Every record in one bucket waits the same duration, so each
// bucket partition is FIFO in due order and is read sequentially. Bucket
// topics use the broker's append time (BucketTopicConfigs), so producers'
// clock skew cannot reorder a bucket.
//
// The ladder is one setting of the cluster, a record of the compacted
// topic LadderTopic (the default until SetLadder sets one): producers,
// workers, delay services and schedulers route by it (ClusterPlanner),
// and a process given another ladder is refused. A Service reads every
// bucket topic that exists, those outside the ladder too, so a task
// routed by an earlier ladder still moves on.
//
// # Hops
//
// The Planner is the pure part: for a remaining delay r = due - now, the
// next hop is the largest bucket b <= r; a record in bucket b moves on at
// its append time plus b (MoveAt), and then r is recomputed from the
// absolute due time carried in the onceq-due header. Below the smallest
// bucket the delay service holds the record in memory and publishes it to
// its queue at the due instant (ReleaseAt). The final hop compares the due
// time with the service's clock, so a task is never early. The number of
// hops is bounded (Hops): a year on the default ladder takes at most 394.
//
//	p, err := delay.NewPlanner([]time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second})
//	hop := p.Next(now, due)  // ToQueue, ToTimer (hop.Wait) or ToBucket (hop.Topic)
//	hop = p.Route(now, due)  // where a producer writes a new task: never ToTimer
//	n := p.Hops(now, due)    // bucket hops on the way, bounded
//
// Producers route delayed tasks with Route (see package producer); the
// Service moves them on.
//
// # The service
//
// A Service is one member of a consumer group (default "onceq-delay") over
// all bucket topics; run several and they share the buckets. It is built
// with options and run until its context ends:
//
//	svc, err := delay.NewService(
//		delay.Conn(conn),             // the brokers
//		delay.WithPlanner(planner),   // optional: the ladder expected (default the cluster's)
//		delay.Group("onceq-delay"),   // instances of a group share the buckets
//		delay.StateDir(dir),          // keeps the instance ID across restarts
//		delay.Registerer(registry),   // Prometheus metrics
//		delay.Logger(logger),
//	)
//	if err != nil { ... }                // a bad option; nothing connected yet
//	err = svc.Run(ctx)                   // nil after ctx ends and a clean leave
//
// "onceq delay" runs a Service alone; "onceq worker" embeds one.
//
// It reads each assigned bucket partition in order, but only as far as the
// records about to be released: a record is read shortly before its
// release (Planner.ReadAhead: the smallest bucket, twice that in the
// smallest bucket) and held in memory until then; a partition whose next
// record is further off is paused until it comes into reach. Memory is
// bounded by what is released within the read-ahead (and by MaxHeld),
// however many tasks wait. Every commit interval (CommitInterval,
// default 10ms) the released records move in one Kafka transaction: due
// ones to their queue, written as Task.Record writes them (without
// onceq-queue), the others unchanged to the bucket Planner.Route picks.
//
// # Guarantees
//
// Never early: a record goes to its queue only if its due time is at or
// before the transaction's time, taken from the service's clock before the
// transaction is written; the record becomes visible when the transaction
// commits, later still.
//
// Exactly once: the outputs and the offset commit of the partitions they
// came from are one transaction (GroupTransactSession: a rebalance aborts
// it). Records are released out of offset order, so the committed offset
// (the first record not moved) comes with a cursor in its metadata: the
// read position H and the transaction's time T. A record has moved if and
// only if its offset is below H and its release time is at or before T;
// both depend on the record alone. After a crash, a rebalance or an
// aborted transaction the partition is read again from its committed
// offset and the records the cursor covers are skipped. Each instance has
// a stable transactional ID (from its instance ID), so a restarted
// instance fences its predecessor's open transaction at once.
//
// Nothing lost: a record that is not a valid delayed task (no onceq-queue,
// no valid onceq-due, malformed onceq headers, a queue that does not
// exist) goes to onceq-dlq-<queue> (onceq-dlq-<bucket topic> when the
// queue is unknown) with the reason in onceq-error.
//
// # Metrics
//
// onceq_delayed_tasks{bucket} counts what waits (end offsets minus the
// group's committed offsets, refreshed every StatsInterval);
// onceq_delay_due_within{horizon="1m|1h|1d"} estimates how many of them
// fall due within the horizon (Planner.DueWithin: delays assumed spread
// evenly between a bucket and the next); onceq_delay_lateness_seconds is
// the publish time minus the due time; onceq_delay_moves_total{from,to}
// counts moves by bucket, "queue" and "dlq". Stats reads the same figures
// for "onceq delay stats".
package delay
