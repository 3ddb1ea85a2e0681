// Package pull is onceq serve's pull model, lmstfy's, and its lease
// protocol: each server runs one worker of its pull group over every
// namespace's queues (a pattern), which fetches a queue only while a
// consumer of the server asks for it (consumer.OnDemand). Its handler
// hands each task to a waiting consumer (Take) and finishes when the
// consumer acknowledges it (Acknowledge, through any server), or fails it
// when its time-to-run passes: every guarantee of the worker holds (the
// task commits once, with its record; a task not acknowledged is retried
// with backoff, then dead-lettered), a slow consumer holds only its own
// task, and a queue holds at most Config.Slots of the worker's places
// (consumer.MaxRunningPerQueue).
//
// Leases live in Kafka, in the pull group's lease topic (lease.go,
// ledger.go): every take, acknowledgment, expiry, grant, probe and
// rejoin is an event there, which every server reads and folds into the
// same states, and the topic's order decides every race. So:
//
//   - a task is handed out at most once within its time-to-run, by
//     whichever server runs it, or by the server it granted it to
//     (grant.go);
//   - an acknowledgment counts once, through any server, before or after
//     a restart of the server that handed the task out, and its result
//     commits with the task's run;
//   - a server that answers no probe (probe.go) is taken for dead and
//     removed from the pull group, so that its partitions move within
//     about a second (failover.go);
//   - a job of a limited queue holds its place from its take to its
//     acknowledgment or the end of its time-to-run (places.go).
//
// The package speaks no HTTP: it answers outcomes (AckOutcome), typed
// errors (ErrHandedOutAgain, EndedError, CommitWaitError) and tasks
// (Handout), which package serve answers its requests with.
package pull
