package console

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/onceq/onceq/auth"
	"github.com/onceq/onceq/periodic"
)

// The console's periodic page: the schedules the token sees, with their
// timing, missed-ticks policy, latest and next ticks, and a button that
// removes one. A token of every namespace sees every schedule, as it sees
// every queue; a namespace's token those the namespace's API shows (see
// inNamespace).

// scheduleRow is a schedule on the periodic page.
type scheduleRow struct {
	periodic.Entry
	// Link is whether the token opens the schedule's queue's page.
	Link bool
}

// seesSchedule reports whether tok sees the schedule e.
func (c *Console) seesSchedule(tok auth.Token, e periodic.Entry) bool {
	if tok.Namespace == auth.AllNamespaces {
		return true
	}
	_, ok := c.api.ScheduleIn(e, tok.Namespace)
	return ok
}

// periodicPage: GET /console/periodic.
func (c *Console) periodicPage(w http.ResponseWriter, _ *http.Request, pg *page) {
	pg.Title = "Periodic"
	var rows []scheduleRow
	for _, e := range c.schedules.List(time.Now()) {
		if c.seesSchedule(pg.Token, e) {
			rows = append(rows, scheduleRow{Entry: e, Link: c.consoleSees(pg.Token, e.Queue)})
		}
	}
	pg.Data = rows
	c.render(w, "periodic", pg)
}

// consolePeriodicRemove: POST /console/periodic/remove (name): removes a
// schedule the token sees.
func (c *Console) consolePeriodicRemove(w http.ResponseWriter, r *http.Request, pg *page) {
	name := strings.TrimSpace(r.FormValue("name"))
	if err := periodic.ValidateName(name); err != nil {
		http.Error(w, strings.TrimPrefix(err.Error(), "periodic: "), http.StatusBadRequest)
		return
	}
	if err := c.schedules.Sync(r.Context()); err != nil {
		back(w, r, "/console/periodic", err.Error())
		return
	}
	e, ok := c.schedules.Get(name, time.Now())
	tok := pg.Token
	if ok && !c.seesSchedule(tok, e) || !ok && tok.Namespace != auth.AllNamespaces && !strings.HasPrefix(name, tok.Namespace+".") {
		c.forbidden(w, pg, fmt.Sprintf("token %s opens namespace %s, not schedule %s", tok.ID, tok.Namespace, name))
		return
	}
	const to = "/console/periodic"
	if !ok {
		back(w, r, to, "no schedule "+name+": it was removed already")
		return
	}
	if err := c.schedules.Remove(r.Context(), name); err != nil {
		back(w, r, to, err.Error())
		return
	}
	back(w, r, to, "removed "+name+": its ticks already submitted still run")
}
