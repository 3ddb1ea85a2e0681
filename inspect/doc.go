// Package inspect answers what happened to a task: its state (pending,
// scheduled, retrying, succeeded, dead, expired, canceled), attempts,
// times, error and result, and waits for it to finish.
//
// Workers write each task's transitions to its queue's records topic,
// onceq-rec-<queue> (onceq.TaskRecord), in the transaction of the outcome
// they describe. An Inspector materializes those topics into a view, the
// way Kafka Streams serves interactive queries from a table restored from
// a topic: a queue is read on its first query, from its start (or, with
// Dir, from where the view stopped) to its last stable offsets, and
// followed from then on by one read_committed consumer for every queue.
// Get, List and Counts answer from the view; Wait is woken when the view
// applies the record that finishes the task, milliseconds after its
// commit, without polling.
//
// # Where the table lives and how it scales
//
// The view is a Pebble store, in memory by default or in a directory
// (Dir), one per process, shared by every caller. It holds the last record
// of each retained task (its JSON line and ten bytes of metadata), the
// records of the attempts that failed and were retried (Attempts), and
// indexes by queue, state and time for List and the counts, and by due
// time for ListDue: about 300 bytes
// per task before Pebble's compression and about 50 after it, so one
// reader serves millions of retained tasks from memory or tens of millions
// from disk. Restoring a view reads the records topic at the broker's pace
// (batches of a commit's records, a million tasks in about 4 seconds on
// two cores). The store keeps no write-ahead log: a view in a directory
// that lost its last writes to a crash reads them again from the topic. When one reader no
// longer keeps up with the queues, run inspectors in several processes,
// each for its share of the queues (a view loads only the queues it is
// asked about), behind the HTTP server.
//
// # Consistency
//
// The view shows committed transitions only (read_committed), in each
// task's order: a task's records are written in one records partition in
// commit order. It lags the commits by a fetch, typically under a
// millisecond on one host. A record a producer wrote (producer's
// Tx.SubmitPending: pending or scheduled) never replaces one a worker
// wrote, so a duplicate submitted late does not make a finished task look
// pending. Tasks whose last transition is older than Retention are hidden,
// and forgotten within a minute.
package inspect
