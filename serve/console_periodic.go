package serve

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

// consoleSeesSchedule reports whether tok sees the schedule e.
func consoleSeesSchedule(tok auth.Token, e periodic.Entry) bool {
	if tok.Namespace == auth.AllNamespaces {
		return true
	}
	_, ok := inNamespace(e, tok.Namespace)
	return ok
}

// periodicPage: GET /console/periodic.
func (s *Server) periodicPage(w http.ResponseWriter, _ *http.Request, pg *page) {
	pg.Title = "Periodic"
	var rows []scheduleRow
	for _, e := range s.schedules.List(time.Now()) {
		if consoleSeesSchedule(pg.Token, e) {
			rows = append(rows, scheduleRow{Entry: e, Link: s.consoleSees(pg.Token, e.Queue)})
		}
	}
	pg.Data = rows
	s.render(w, "periodic", pg)
}

// consolePeriodicRemove: POST /console/periodic/remove (name): removes a
// schedule the token sees.
func (s *Server) consolePeriodicRemove(w http.ResponseWriter, r *http.Request, pg *page) {
	name := strings.TrimSpace(r.FormValue("name"))
	if err := periodic.ValidateName(name); err != nil {
		http.Error(w, strings.TrimPrefix(err.Error(), "periodic: "), http.StatusBadRequest)
		return
	}
	if err := s.schedules.Sync(r.Context()); err != nil {
		back(w, r, "/console/periodic", err.Error())
		return
	}
	e, ok := s.schedules.Get(name, time.Now())
	tok := pg.Token
	if ok && !consoleSeesSchedule(tok, e) || !ok && tok.Namespace != auth.AllNamespaces && !strings.HasPrefix(name, tok.Namespace+".") {
		s.forbidden(w, pg, fmt.Sprintf("token %s opens namespace %s, not schedule %s", tok.ID, tok.Namespace, name))
		return
	}
	const to = "/console/periodic"
	if !ok {
		back(w, r, to, "no schedule "+name+": it was removed already")
		return
	}
	if err := s.schedules.Remove(r.Context(), name); err != nil {
		back(w, r, to, err.Error())
		return
	}
	back(w, r, to, "removed "+name+": its ticks already submitted still run")
}
