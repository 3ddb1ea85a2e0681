package periodic

import "time"

// A plan is what a scheduler does next with one schedule's ticks.
type plan struct {
	// submit are the ticks to submit now, in order.
	submit []time.Time
	// late is how many of submit, the first ones, are missed ticks being
	// caught up.
	late int
	// skipped missed ticks, from skippedFirst to skippedLast, are dropped:
	// by SkipMissed, or beyond MaxCatchUp.
	skipped                   int
	skippedFirst, skippedLast time.Time
	// done is the latest tick the plan submits or skips: once the
	// submissions are acknowledged, every tick up to it is done.
	done time.Time
}

// planTicks decides what a scheduler does, at now, with the ticks of c
// after last (the latest tick that was submitted or skipped). Ticks up to
// now+lead are submitted: lead before they are due, so that they run on
// time. Ticks before now-lead are missed: no scheduler submitted them in
// time. By c.Missed they are all submitted (at most maxCatchUp, the
// latest; the older ones are skipped) or all skipped. It is pure: the
// clock is now.
func planTicks(c *compiled, last, now time.Time, lead time.Duration, maxCatchUp int) plan {
	p := plan{done: last}
	keep := maxCatchUp
	if c.Missed == SkipMissed {
		keep = 0
	}
	missed := c.between(last, now.Add(-lead-time.Nanosecond), keep)
	if missed.n > 0 {
		p.submit = append(p.submit, missed.latest...)
		p.late = len(missed.latest)
		if p.skipped = missed.n - len(missed.latest); p.skipped > 0 {
			p.skippedFirst, p.skippedLast = missed.first, missed.dropped
		}
		p.done = missed.last
	}
	for t := c.next(p.done); !t.IsZero() && !t.After(now.Add(lead)); t = c.next(t) {
		p.submit = append(p.submit, t)
		p.done = t
	}
	return p
}
