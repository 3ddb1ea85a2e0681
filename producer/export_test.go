package producer

// LatencySample is latencySample, for the metrics test.
const LatencySample = latencySample

// HeldSlots is how many admission slots p holds, for the tests of SubmitMany.
func HeldSlots(p *Producer) int64 { return p.slots.held.Load() }
