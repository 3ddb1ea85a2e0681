package consumer

// SetScanWakes says whether w's look at its partitions' offsets wakes the
// quiet ones (it does unless a test says otherwise): with it off, only
// wake-ups do.
func SetScanWakes(w *Worker, on bool) { w.noScanWake.Store(!on) }
