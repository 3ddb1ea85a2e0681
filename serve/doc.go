// Package serve is onceq's HTTP server: an API for producers and
// operators in any language, following lmstfy's paths and parameters
// (/api/{namespace}/{queue}, delay, ttl, tries, X-Token), over the
// producer, package inspect and the token store (package auth).
//
// # Namespaces
//
// A namespace owns the queues named <namespace>.<queue>: the queue
// "emails" of namespace "shop" is the Kafka topic shop.emails, its dead
// letters onceq-dlq-shop.emails, its records onceq-rec-shop.emails. A
// queue's name holds letters, digits and '-': Kafka takes '.' and '_' in
// topic names for one character, and a namespace name may hold '_', so
// with either shop's queue x_y and shop_x's queue y would be one topic.
// Its length leaves room for the pull group's changelog of the topic, so
// whatever a publish takes can be consumed. A namespace's workflow IDs
// are its own, kept as <namespace>/<id> (workflow.PrepareScoped) and
// answered without the prefix; what a namespace does not see is not
// found. A token opens one namespace, or every one ("*"); a read-only
// token never writes.
//
// Every request's header must arrive within ReadHeaderTimeout and its
// body within BodyReadTimeout, and a Listener holds at most MaxConns
// connections, of which those that carry no request give their place to
// the next: serve Handler with HTTPServer on a Listener. Healthy and
// Ready answer /healthz and /readyz, for probes served on a listener of
// their own as well (onceq serve --metrics-addr).
//
// # Endpoints
//
//	GET    /healthz                              no token: 200 "ok", 503 naming an unhealthy side service
//	                                             or a pull worker that stopped
//	GET    /readyz                               no token: 200 "ok" once the side services are ready
//	                                             and the pull worker runs, else 503
//	GET    /metrics                              Prometheus metrics: an operator's token ("*")
//	PUT    /api/{ns}/{queue}                     publish one task: the body is its payload; id=,
//	                                             delay=, ttl=, tries=, timeout=, priority=
//	GET    /api/{ns}/{q1},{q2}                   consume (long-poll): ttr=, timeout=, count=, freeze_tries=
//	DELETE /api/{ns}/{queue}                     destroy the queue's backlog
//	PUT    /api/{ns}/{queue}/bulk                lmstfy's bulk publish: a JSON array of payloads;
//	                                             delay=, ttl=, tries=, timeout=, priority=
//	POST   /api/{ns}/{queue}/bulk                publish a JSON array of tasks in one transaction
//	GET    /api/{ns}/{queue}/peek                the job that waits the longest
//	GET    /api/{ns}/{queue}/job/{id}            lmstfy's peek of a job: its data, and its
//	                                             state, attempts and error; 404 once it ended
//	GET    /api/{ns}/{queue}/task/{id}           a task: its data while it waits, and its
//	                                             state, attempts, error and result
//	PUT    /api/{ns}/{queue}/job/{id}            republish: ACK it, publish the body anew
//	GET    /api/{ns}/{queue}/job/{id}/wait       the record once it is final (timeout=)
//	DELETE /api/{ns}/{queue}/job/{id}            acknowledge a task handed out, through any
//	                                             server (body: its result; lease=), else cancel
//	                                             it: 204, what it did in Onceq-Outcome
//	GET    /api/{ns}/{queue}/size                the jobs waiting for a consumer
//	POST   /api/{ns}/{queue}/job/{id}/cancel     cancel it (ahead=): 200 canceled, 202 pending,
//	                                             404 unknown, 409 already final, 410 too late
//	GET    /api/{ns}/{queue}/stats               tasks by state and due time, groups
//	POST   /api/{ns}/{queue}/pause               stop workers fetching the queue
//	POST   /api/{ns}/{queue}/resume              and start again
//	GET    /api/{ns}/{queue}/limit               the queue's limit across every worker
//	PUT    /api/{ns}/{queue}/limit               set it: rate= (10/s, 600/m), running=
//	DELETE /api/{ns}/{queue}/limit               lift it
//	GET    /api/{ns}/{queue}/deadletter          peek the dead letters (limit=)
//	GET    /api/{ns}/{queue}/deadletter/size     how many there are
//	PUT    /api/{ns}/{queue}/deadletter          respawn (limit=, ttl=, id=), in one transaction
//	DELETE /api/{ns}/{queue}/deadletter          delete the first ones (limit=)
//	GET    /api/{ns}                             the namespace's queues (filter=, after=, before=,
//	                                             limit=)
//	GET    /periodic/{ns}                    the namespace's periodic schedules
//	GET    /periodic/{ns}/{name}             one schedule, with its next tick
//	PUT    /periodic/{ns}/{name}             add or replace it: queue=, every= or cron= (tz=),
//	                                             missed=, payload= (or the body), max_attempts=, timeout=
//	DELETE /periodic/{ns}/{name}             remove it
//	GET    /api/openapi.json                     the OpenAPI 3 document of the API
//
// # Periodic schedules
//
// Schedule names are global (package periodic keeps them in one topic),
// so a namespace's schedule "nightly" is stored as "shop.nightly", and its
// queue is one of the namespace's. A namespace sees the schedules whose
// name and queue carry its prefix, shown without it, as `onceq periodic
// list --json` writes them. The schedules' paths, under /periodic/{ns},
// are apart from the queues' under /api/{ns}, as the tokens' are under
// /token/{ns}: any queue name is free.
//
// # Consuming over HTTP
//
// Each server runs one worker of its pull group (onceq-serve, PullGroup)
// over every namespace's queue, which fetches a queue only while one of
// the server's consumers waits for it, and holds at most PullSlots tasks
// of a queue. Its handler offers each task to the waiting consumers, the
// first queue of the path first and, within a queue, the highest priority
// first, then in the order the tasks came; and it waits for the one that
// took it to acknowledge it within its ttr: the task then commits, with
// its result, exactly once, and the DELETE answers 204 once the commit is
// visible. A task not acknowledged in time is failed as a handler's error
// is: retried with backoff (the server runs a delay service,
// DelayService), dead-lettered after its tries; one taken with
// freeze_tries is snoozed instead, and comes back at once with its try. A
// task no consumer asks for goes back to the queue as it came (released:
// its attempt and tries unchanged) 30 s after the worker's last want of
// its queue ended, and stays there: the worker fetches the queue no more
// then.
//
// The pull worker and its lease protocol are package serve/internal/pull,
// which speaks no HTTP: this package answers its outcomes and errors.
//
// Leases live in Kafka, in the group's lease topic onceq-leases-<group>:
// every take, acknowledgment and expiry is an event there, which every
// server reads, and the topic's order decides every race. So an
// acknowledgment works through any server of the group, before or after
// a restart of the one that handed the job out, and a job is never handed
// out twice within its ttr. A consume answers a lease; an acknowledgment
// that names it (lease=) is refused (409) if the job was handed out again
// since, and one that names none completes the job as lmstfy's does. An
// acknowledgment after the ttr answers at once, whether or not the server
// that handed the job out is up: 204 with Onceq-Outcome: later while the job waits for its next
// run, which completes it with the acknowledged result, without handing
// it out again; 409 for a job dead after its last try by then, whose
// result is not kept. An acknowledgment in time answers 204 acknowledged once the
// job's run committed the result, or later if that run is not running:
// within about 750 ms if the server running it died or lost it (it does
// not answer a probe, or answers that it lost the run), and after about
// 11 s if it waits behind the jobs held for consumers: the run completes
// the job with the result
// when it comes. A queue's
// partitions belong to one server at a time: a server whose consumers
// wait for a queue it does not own says so in the lease topic, and the
// server running the queue's tasks grants them to it.
//
// A queue's limit (PUT .../limit) counts its jobs handed out: running=
// bounds the jobs out with consumers at once, across every server, from
// a consumer's take to the job's acknowledgment or the end of its ttr,
// and rate= the hand-outs. A job waiting for a consumer holds no place;
// a consumer takes no job of a queue whose limit has no place for it, and
// waits for one up to its timeout. A server that dies holds its places
// until its jobs' ttr and 5 s end.
//
// A DELETE answers 204, as lmstfy's client takes any other answer for a
// failure, and says what it did in its Onceq-Outcome header. Of a task
// that is not handed out it cancels it (canceled), as lmstfy's DELETE
// makes sure it is never consumed again; of a task succeeded, canceled
// (while handed out too) or unknown it does nothing (none), as an ACK is
// idempotent.
//
// A publish without tries or ttl gets lmstfy's defaults (DefaultTries,
// DefaultJobTTL), and lmstfy's Job-Attr-* headers are kept as the task's
// job-attr-* headers and answered as its attributes; as sent, they count
// with the payload toward MaxPayloadBytes (past it: 413). A publish's
// priority, onceq's, is the task's (onceq.Task.Priority): 0, the default
// and the lowest, to 9; any other value is refused (400, field priority).
// A consumed or peeked job answers it as "priority", left out when 0:
// lmstfy's client ignores fields it does not know. The POST bulk's tasks
// give theirs as a JSON line does.
//
// A token's limit, lmstfy's throttler's (set on the admin API,
// AdminHandler), bounds its consumes and its publishes (one job, or
// lmstfy's bulk) in each interval: past it they answer 429, with
// Retry-After and lmstfy's body {"msg": ...} besides the "error". The
// servers share the count through the token store's topic: one server is
// exact, and a fleet may admit more than the limit by what the other
// servers admit in about 100 ms (throttle.go).
//
// POST .../job/{id}/cancel is onceq's own cancel, and its status says what
// the cancel did: 200 it ended canceled, 202 it ends canceled when it
// reaches a worker, 404 no record of it (nothing written; ahead=true
// cancels it all the same), 409 already final, 410 it was running and
// finished first.
//
// # Side services
//
// A server runs a delay service, a workflow service and a periodic
// scheduler (DelayService, WorkflowService, Scheduler) as onceq worker
// does, under the same failure policy (package internal/sides): one that
// stops stops the others and closes Done, with Err naming it. The server
// goes on answering, but delayed tasks and retries no longer move, so
// whoever serves Handler stops serving and ends on Err, as onceq serve
// does (exit code 1), for the supervisor to restart the process.
// /healthz and /readyz report the side services' health and readiness.
//
// The pull worker is not under that policy: New waits until it started,
// and fails if it cannot (a DataDir whose pull checkpoint belongs to
// another PullGroup wraps checkpoint.ErrMismatch); one that stops later
// is replaced by a new one, after a pause that doubles from 1s to 30s
// while its successors keep stopping, and the probes answer 503 naming it
// meanwhile.
//
// # The console
//
// /console/ serves the web console: server-rendered pages with every
// asset embedded, behind a login with a token (an HttpOnly,
// SameSite=Strict cookie) or basic auth with the token as password. A
// read-only token sees the pages without their actions. /console/periodic
// lists the schedules the token sees, each with a remove button.
// The console is package serve/internal/console, which asks this
// package's API for what both answer alike (consoleapi.go).
//
// Every answer of the API is JSON; an error is {"error": "...", "field": "..."} with
// the parameter at fault, and a refused request writes nothing.
package serve
