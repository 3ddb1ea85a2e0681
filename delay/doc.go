// Package delay delays tasks by any amount on stock Kafka, without a topic
// per delay and without holding waiting tasks in memory.
//
// A delayed task waits in bucket topics of a fixed ladder (default 1s 5s
// 30s 2m 10m 1h 6h 1d; topics onceq-delay-1s ... onceq-delay-1d) shared by
// all queues. Every record in one bucket waits the same duration, so each
// bucket partition is FIFO in due order and is read sequentially. Bucket
// topics use the broker's append time (BucketTopicConfigs), so producers'
// clock skew cannot reorder a bucket.
//
// The Planner is the pure part: for a remaining delay r = due - now, the
// next hop is the largest bucket b <= r; a record in bucket b moves on at
// its append time plus b (MoveAt), and then r is recomputed from the
// absolute due time carried in the onceq-due header. Below the smallest
// bucket the delay service holds the record in an in-memory timer and
// publishes it to its queue at the due instant. The final hop compares the
// due time with the service's clock, so a task is never early.
//
//	p, err := delay.NewPlanner([]time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second})
//	hop := p.Next(now, due)  // ToQueue, ToTimer (hop.Wait) or ToBucket (hop.Topic)
//	hop = p.Route(now, due)  // where a producer writes a new task: never ToTimer
//	n := p.Hops(now, due)    // bucket hops on the way, bounded
//
// Producers route delayed tasks with Route (see package producer); the
// delay service moves them on with Next.
package delay
