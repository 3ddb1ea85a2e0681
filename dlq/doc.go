// Package dlq encodes, reads, counts and requeues dead letters: the tasks
// a worker or the delay service gave up on, kept in the dead-letter topic
// onceq-dlq-<queue> of their queue with every original header, the reason
// and error text in onceq-error ("<reason>: <text>") and the failure time
// in onceq-failed. Every writer encodes them with EncodeTask or
// EncodeRecord, so Decode reads them all alike.
//
// A Reader sees a dead-letter topic the way any read_committed Kafka
// consumer does, from its start to its last stable offset at the time of
// the call, so it never waits for transactions still open:
//
//	r, err := dlq.NewReader(broker.Conn{Brokers: []string{"127.0.0.1:9092"}})
//	if err != nil { ... }
//	defer r.Close()
//	var st dlq.Stats
//	err = r.Read(ctx, "emails", func(l dlq.Letter) error {
//		st.Add(l)
//		fmt.Println(l.Partition, l.Offset, l.Task.ID, l.Reason, l.Error)
//		return nil
//	})
//
// List, QueueStats and Requeues are the reads `onceq dlq` makes; WriteJSON
// and WriteTable (WriteStatsJSON and WriteStatsTable for counts) print
// what they return. Letter.MarshalJSON is the JSON shape of a dead letter
// that every interface shows: id, queue, partition, offset, attempt,
// failed, reason, error, requeued, headers (in order), key_base64 and
// payload_base64.
//
// # Requeueing
//
// A dead-lettered task's run is marked processed, so writing it back with
// the same ID alone would be skipped as a duplicate. A requeued task is a
// new incarnation of its ID instead: Incarnation keeps its ID, key,
// payload, headers, attempt and last error; clears its failure time and an
// expiry already past (it would only be dead-lettered as expired again; a
// future expiry is kept); makes it due at once; and sets onceq-requeued to
// the dead letter's "<partition>/<offset>". A worker remembers the run by
// "<ID>@<partition>/<offset>[#attempt]", so the incarnation runs even though
// the ID was processed, and requeueing the same dead letter twice writes
// two records with one dedup key: the task runs once.
//
// Without resetting attempts a task keeps its attempt number: one that
// used up its attempts gets exactly one more run, and is dead-lettered
// again if that fails; one sent to its dead letters early (SkipRetry,
// expiry) gets its remaining attempts. With resetting it starts over at
// attempt 1. Requeue one dead letter always the same way: since the
// attempt is part of the dedup key, requeueing it once with and once
// without resetting may run it twice.
//
// Choose picks, for each ID, its newest dead letter: older ones of the
// same ID are earlier incarnations. Write submits the chosen tasks in one
// transaction of a Submitter (a *producer.Producer): all of them become
// visible to workers, or none.
// A malformed dead letter (one whose onceq headers do not decode) cannot
// be requeued; fix it and submit it again.
package dlq
