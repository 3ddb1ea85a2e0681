package serve

import (
	"context"
	"strings"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/control"
	"github.com/onceq/onceq/periodic"
	"github.com/onceq/onceq/workflow"
)

// consoleAPI is the API as the console asks it (console.API): the
// console's pages answer by the API's rules.
type consoleAPI struct{ s *Server }

func (a consoleAPI) QueueLimit(ctx context.Context, queue string) (control.QueueLimit, error) {
	return a.s.queueLimit(ctx, queue)
}

func (a consoleAPI) ParseLimit(rate, running string) (control.Limit, error) {
	return parseLimit(rate, running)
}

func (a consoleAPI) FindTask(ctx context.Context, queue, id string, rec *onceq.TaskRecord) (onceq.Task, bool, error) {
	t, found, _, err := a.s.findTask(ctx, queue, id, rec)
	return t, found, err
}

func (a consoleAPI) RemoveLetters(ctx context.Context, queue string, ends map[int32]int64) error {
	return a.s.removeLetters(ctx, queue, ends)
}

func (a consoleAPI) QueueNames(ctx context.Context) ([]string, error) { return a.s.queueNames(ctx) }

func (a consoleAPI) FindWorkflow(ctx context.Context, ns, id string) (workflow.Status, string, error) {
	return a.s.findWorkflow(ctx, ns, id)
}

func (a consoleAPI) RetryIn(ns, id string) workflow.RetryOpt { return a.s.retryIn(ns, id) }

// WorkflowIn: a namespace sees the workflows kept in it, and those
// submitted outside the API without one whose steps are all in it.
func (a consoleAPI) WorkflowIn(ns, id string, st *workflow.Status) bool {
	own := ns == auth.AllNamespaces || strings.HasPrefix(id, ns+"/")
	if st == nil {
		return own || !isNamespaced(id)
	}
	return ns == auth.AllNamespaces || !(st.Root == nil && !own || st.Root != nil && outside(st.Root, a.s.inNamespace(ns)))
}

func (a consoleAPI) ScheduleIn(e periodic.Entry, ns string) (periodic.Entry, bool) {
	return inNamespace(e, ns)
}
