// Package periodic runs tasks on a schedule, exactly once per tick, with
// no leader: cron specs in a time zone, or fixed intervals.
//
// A Schedule names a queue, its timing (Every, or Cron and TZ), the
// payload and limits of its tasks, and what to do with ticks that every
// scheduler missed (Missed). Schedules live in a Store, the compacted
// topic onceq-periodic, so they survive restarts; add, list and remove
// them from any process:
//
//	store, err := periodic.Open(ctx, conn, log)
//	if err != nil { ... }
//	defer store.Close()
//	_, err = store.Add(ctx, periodic.Schedule{Name: "nightly-report", Queue: "reports",
//		Cron: "0 2 * * *", TZ: "Europe/Paris", Payload: []byte(`{"kind":"sales"}`)})
//	for _, e := range store.List(time.Now()) {
//		fmt.Println(e.Name, e.Timing(), "next", e.Next)
//	}
//
// A Scheduler follows the store and submits each tick as a task whose ID
// is TaskID(name, tick), "nightly-report@2030-01-01T01:00:00Z", due at the
// tick, a little ahead of it (Lead), so that it runs on time and never
// early. The ID is an idempotency key: any number of schedulers submit
// each tick, and workers run it once. onceq worker runs a scheduler beside
// its handlers (--scheduler, on by default), so every worker is one:
//
//	s, err := periodic.NewScheduler(periodic.Conn(conn), periodic.Logger(log))
//	if err != nil { ... }
//	err = s.Run(ctx) // until ctx ends
//
// After its submissions are acknowledged a scheduler records the latest
// tick, the schedule's cursor, in the store. A scheduler that starts after
// every scheduler was down resumes from there: the ticks it comes to more
// than Lead late are missed, and the schedule's policy either submits them
// (CatchUp, at most MaxCatchUp, the latest) or drops them (SkipMissed).
//
// A tick runs once because the workers remember its ID for their dedup
// window (7 days by default). Every submission of a tick comes within
// moments of the others, except one that catches up on it because the
// cursor recording it was lost: that one runs again if it comes after the
// window.
package periodic
