package consumer

import "time"

// SetScanWakes says whether w's look at its partitions' offsets wakes the
// quiet ones (it does unless a test says otherwise): with it off, only
// wake-ups do.
func SetScanWakes(w *Worker, on bool) { w.noScanWake.Store(!on) }

// Clock sets the clock by which a worker expires processed IDs past its
// dedup window, so that a test need not wait the window out.
func Clock(now func() time.Time) Opt { return optFunc(func(c *config) { c.now = now }) }
