// Package bench measures onceq and verifies its guarantees independently:
// a load generator, five scenarios, a verifier that reads the output as any
// read_committed Kafka consumer would, and a report as a table and JSON.
// "onceq bench" is its command line, which also draws the report as an
// HTML page with charts (--report).
//
// The scenarios:
//
//   - produce: the producer's SubmitAsync, side by side with raw franz-go
//     producing the same records;
//   - process: a pre-loaded queue drained by workers, side by side with
//     franz-go's GroupTransactSession copy loop (CopyLoop) and with the
//     at-least-once guarantee;
//   - e2e: producing and processing at once, at a rate or flat out;
//   - delay: delayed tasks moved by the delay service, with their lateness
//     and a count of early ones (which must be zero);
//   - chaos: "onceq worker" subprocesses, and optionally the broker
//     process, SIGKILLed and restarted at random while they work.
//
// Every scenario ends with a fresh read_committed reader of its output
// checked against what was submitted: expected, unique, duplicates,
// missing; exactly-once runs also check each task's run counter, which the
// handler keeps in its state and writes in the RunsHeader of its output.
//
//	rep, err := bench.Run(ctx, bench.Options{Scenario: bench.Process, Tasks: 100_000})
//	if err != nil { ... }        // the bench could not run
//	rep.WriteTable(os.Stdout)
//	if !rep.OK { ... }           // verification failed: rep.Failures()
//
// With no brokers in Options.Conn the bench starts its own embedded broker
// on a temporary data dir. The load is seeded (Options.Seed); the report
// carries the seed so a run can be replayed.
package bench
