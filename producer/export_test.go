package producer

// LatencySample is latencySample, for the metrics test.
const LatencySample = latencySample
