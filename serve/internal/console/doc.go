// Package console is onceq serve's web console under /console/:
// server-rendered pages, every asset embedded (assets/), behind the same
// tokens as the API. A login keeps the token in an HttpOnly,
// SameSite=Strict cookie of /console; actions are POST forms, refused
// across origins; a read-only token sees the pages without their buttons
// and is refused the actions; a namespace's token sees its own queues,
// workflows and schedules alone, named as its API names them.
//
// The console reads and acts through the server's clients (Deps) and
// asks the server's API (API) for what both must answer alike: a queue's
// limit, a task's payload, the namespaces' queues and workflows. It
// answers HTML, never the API's JSON.
package console
