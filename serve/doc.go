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
// namespace has no '.', so the first one in a topic's name ends it. A
// token opens one namespace, or every one ("*"); a read-only token never
// writes.
//
// # Endpoints
//
//	GET    /healthz                              no token: 200 "ok"
//	GET    /metrics                              Prometheus metrics
//	PUT    /api/{ns}/{queue}                     publish one task: the body is its payload
//	POST   /api/{ns}/{queue}/bulk                publish a JSON array of tasks in one transaction
//	GET    /api/{ns}/{queue}/job/{id}            a task's state, attempts, error and result
//	GET    /api/{ns}/{queue}/job/{id}/wait       the same once it is final (timeout=)
//	DELETE /api/{ns}/{queue}/job/{id}            cancel a task that has not started
//	GET    /api/{ns}/{queue}/size                the tasks waiting
//	GET    /api/{ns}/{queue}/stats               tasks by state and due time, groups
//	POST   /api/{ns}/{queue}/pause               stop workers fetching the queue
//	POST   /api/{ns}/{queue}/resume              and start again
//	GET    /api/{ns}                             the namespace's queues
//
// Every answer is JSON; an error is {"error": "...", "field": "..."} with
// the parameter at fault, and a refused request writes nothing.
package serve
