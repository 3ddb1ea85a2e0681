# onceq: make demo runs the main job on the embedded broker; make test runs the tests.
GO            ?= go
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_TIMEOUT  ?= 20m
FUZZTIME      ?= 10s
BIN           := bin/onceq
# PKGS is every package of the checkout: the library's module (./...) and
# the CLI's (cmd/onceq, a module of its own), which go.work joins. In a
# workspace ./... names the packages of the module at . alone.
PKGS          := ./... ./cmd/onceq/...

.PHONY: all build test test-short lint tidy demo bench fuzz chaos soak clean

all: build

build:
	@# The commit it was built from, for onceq version; a checkout git
	@# cannot read (another user's) builds without it.
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/onceq 2>/dev/null || $(GO) build -buildvcs=false -o $(BIN) ./cmd/onceq

## test: what CI runs: every test with the race detector on the embedded
## broker (test-embedded), then the guarantee suites of KAFKA_SUITES_CI on
## one Apache Kafka 4.4 node (test-kafka-ci; Java and Maven needed)
test: test-embedded test-kafka-ci

## test-embedded: every test of both modules with the race detector, each package's start
## and end printed as they happen (internal/testprogress), the output of the
## tests that failed after them
.PHONY: test-embedded
test-embedded:
	@$(GO) build -o bin/testprogress ./internal/testprogress
	@$(GO) test -json -race -count=1 -timeout $(TEST_TIMEOUT) $(PKGS) | bin/testprogress

## kafka: one Apache Kafka node for development, from Maven Central's jars
## (internal/kafkatest), until Ctrl-C; it prints the seeds to give onceq.
## KAFKA_VERSION picks the version, KAFKA_NODES the nodes (1 or 3)
KAFKA_VERSION ?= 4.4.0
KAFKA_NODES   ?= 1
.PHONY: kafka
kafka:
	$(GO) run ./internal/kafkatest/cmd/kafka -version $(KAFKA_VERSION) -nodes $(KAFKA_NODES)

## test-kafka: the guarantee suites on Apache Kafka instead of the embedded
## broker (internal/testutil: ONCEQ_TEST_KAFKA), one cluster per package of
## KAFKA_NODES nodes of KAFKA_VERSION (KAFKA_TXN_VERSION=1 formats it with
## transactions before KIP-890); the jars come from Maven Central the first
## time. KAFKA_SUITES lists package=tests; tests that need the embedded
## broker's internals skip themselves. Every package runs, then the target
## fails if one did.
KAFKA_TXN_VERSION ?=
KAFKA_SUITES ?= \
  './internal/kafkatest=.' \
  './broker=^Test(RemoveMember|NewMemberFencesItsPredecessor|MemberClosesWhileFencing)$$' \
  './producer=.' \
  './delay=^Test(NeverEarly|ExactlyOnceNeverEarly|KilledServiceLosesNothing|BadRecordsAreDeadLettered)$$' \
  './consumer=^Test(Crash|ChainedStages$$|RetryWithBackoffThenSuccess$$|RetryAfterIsCapped$$|AlwaysFailingEndsInDeadLetters$$|AbandonedHandlerIsRetried$$|SkipRetryDeadLetters$$|TooLargeTaskEndsInDeadLetters$$|EmittedTasksRecorded$$|RunningRecorded$$)' \
  './control=^TestTasksVisibleFromSubmission$$' \
  './workflow=.' \
  './periodic=.' \
  './serve=.' \
  './cmd/onceq=^Test(PeriodicCrash|PeriodicCrashOnLane|ServeCrashPull|ServeFleetCrash|ServeMovesTopicPerQueueJobs|ServeAckAfterRunnerKilled|ServeFailoverWithinSeconds|LmstfyRustClient)$$'
.PHONY: test-kafka
test-kafka:
	@$(GO) build -o bin/testprogress ./internal/testprogress
	@failed=""; $(call kafka-suites,$(KAFKA_NODES),$(KAFKA_SUITES),$(KAFKA_VERSION),$(KAFKA_TXN_VERSION)) \
	if [ -n "$$failed" ]; then echo "test-kafka: failed:$$failed"; exit 1; fi

# kafka-suites is the shell loop that runs the suites $(2), package=tests,
# on a cluster of $(1) nodes of Kafka $(3) (transaction.version $(4) if
# given), adding the packages that fail to $$failed.
kafka-suites = for spec in $(2); do \
	  pkg=$${spec%%=*}; run=$${spec\#*=}; \
	  ONCEQ_TEST_KAFKA=$(1) ONCEQ_TEST_KAFKA_VERSION=$(3) \
	  ONCEQ_TEST_KAFKA_TXN_VERSION=$(4) \
	  $(GO) test -json -count=1 -timeout $(TEST_TIMEOUT) -run "$$run" $$pkg | bin/testprogress || failed="$$failed $$pkg($(1)x$(3)$(if $(4),/txn$(4)))"; \
	done;

## test-kafka-matrix: the suites of KAFKA_SUITES_MATRIX on one node of Kafka
## 4.4.0 with transaction.version 1 (transactions before KIP-890), then on
## one node of Kafka 4.0.0
KAFKA_SUITES_MATRIX ?= \
  './internal/kafkatest=.' \
  './producer=.' \
  './delay=^Test(NeverEarly|ExactlyOnceNeverEarly|KilledServiceLosesNothing|BadRecordsAreDeadLettered)$$' \
  './consumer=^Test(RetryWithBackoffThenSuccess|AlwaysFailingEndsInDeadLetters|TooLargeTaskEndsInDeadLetters|CrashCopyWithDuplicates|CrashCancel|CrashPoints|ChainedStages)$$'
.PHONY: test-kafka-matrix
test-kafka-matrix:
	@$(GO) build -o bin/testprogress ./internal/testprogress
	@failed=""; $(call kafka-suites,1,$(KAFKA_SUITES_MATRIX),4.4.0,1) $(call kafka-suites,1,$(KAFKA_SUITES_MATRIX),4.0.0,) \
	if [ -n "$$failed" ]; then echo "test-kafka-matrix: failed:$$failed"; exit 1; fi

## test-kafka-ci: what CI runs on Apache Kafka: the suites of KAFKA_SUITES_CI
## on one node, then those of KAFKA_SUITES_CLUSTER on three: the crash test
## with two nodes SIGKILLed and restarted (ONCEQ_NODE_KILL_TASKS sizes it)
KAFKA_SUITES_CI ?= \
  './internal/kafkatest=.' \
  './producer=.' \
  './delay=^Test(NeverEarly|ExactlyOnceNeverEarly|KilledServiceLosesNothing|BadRecordsAreDeadLettered)$$' \
  './consumer=^Test(RetryWithBackoffThenSuccess|AlwaysFailingEndsInDeadLetters|TooLargeTaskEndsInDeadLetters|CrashCopyWithDuplicates|CrashCancel|CrashPoints|EmittedTasksRecorded|RunningRecorded)$$' \
  './control=^TestTasksVisibleFromSubmission$$' \
  './cmd/onceq=^TestServeFailoverWithinSeconds$$'
KAFKA_SUITES_CLUSTER ?= './consumer=^TestCrashKafkaNodeKills$$'
.PHONY: test-kafka-ci
test-kafka-ci:
	@$(GO) build -o bin/testprogress ./internal/testprogress
	@failed=""; $(call kafka-suites,1,$(KAFKA_SUITES_CI),$(KAFKA_VERSION),$(KAFKA_TXN_VERSION)) $(call kafka-suites,3,$(KAFKA_SUITES_CLUSTER),$(KAFKA_VERSION),$(KAFKA_TXN_VERSION)) \
	if [ -n "$$failed" ]; then echo "test-kafka-ci: failed:$$failed"; exit 1; fi; \
	echo "test-kafka-ci: the suites of KAFKA_SUITES_CI and KAFKA_SUITES_CLUSTER passed on Apache Kafka $(KAFKA_VERSION)"

## test-short: the fast tests of both modules, without -race
test-short:
	$(GO) test -short -count=1 $(PKGS)

## lint: gofmt, go vet, staticcheck (pinned, through the module proxy) and a
## 32-bit build, which catches constants that overflow a 32-bit int, of
## both modules
lint:
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	GOARCH=386 $(GO) build $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

## tidy: go mod tidy of the library's module, the CLI's and bench/watermill's.
## go mod tidy reads no go.work, and cmd/onceq/go.mod requires a version of
## the library that only go.work points at the checkout: the CLI's module is
## tidied with a replace directive to the checkout that it drops again
## (go install ...@version refuses a module whose go.mod has one).
tidy:
	$(GO) mod tidy
	@cd cmd/onceq && $(GO) mod edit -replace github.com/onceq/onceq=../.. && \
	GOWORK=off $(GO) mod tidy; rc=$$?; \
	$(GO) mod edit -dropreplace github.com/onceq/onceq && exit $$rc
	cd bench/watermill && GOWORK=off $(GO) mod tidy

## demo: the main job on the embedded broker
demo: build
	./$(BIN) demo

## bench: the Go benchmarks (figures for the closing notes and the README)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 3 -timeout 60m $(PKGS)

## bench-queues: one worker over 1, 1,000 and 10,000 queues (ONCEQ_BENCH_QUEUES
## picks others): start, latency at 200 tasks/s, idle CPU, memory
.PHONY: bench-queues
bench-queues:
	$(GO) test ./consumer -run '^$$' -bench 'BenchmarkQueues$$' -benchtime 1x -timeout 30m

## bench-read: the read side over 10,000 queues (ONCEQ_BENCH_QUEUES picks
## another number): queue list, stats, pause, task get, dead letters, console
.PHONY: bench-read
bench-read:
	$(GO) test ./serve -run '^$$' -bench 'BenchmarkReadSide' -benchtime 5x -timeout 30m

## bench-drain: the drain of a pre-loaded queue by `onceq worker` built from
## the working tree and from BASE (a commit), interleaved, with franz-go's own
## copy loop as the floor: rates, CPU per task and head's ratio to base.
## Every change to the engine says it is no slower than its base with it.
## BROKERS runs it on that cluster (make kafka's seeds, say) instead of an
## embedded broker of its own.
BASE    ?= HEAD
TASKS   ?= 1000000
ROUNDS  ?= 3
BROKERS ?=
.PHONY: bench-drain
bench-drain:
	$(GO) run ./internal/drainguard -base $(BASE) -tasks $(TASKS) -rounds $(ROUNDS) $(if $(BROKERS),-brokers $(BROKERS))

## bench-watermill: the exactly-once worker against Watermill's Kafka subscriber
## and asynq (on a redis-server of its own; Debian's redis-server package),
## side by side (bench/watermill, a module of its own outside go.work, with
## the checkout's library by a replace directive: onceq depends on none of
## them); ONCEQ_BENCH_BROKERS=<seeds> runs it on that cluster
.PHONY: bench-watermill
bench-watermill:
	cd bench/watermill && GOWORK=off $(GO) test -run '^$$' -bench . -benchtime 3x -timeout 30m

## fuzz: every fuzz target of both modules for FUZZTIME each
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

## chaos: the fault suite, long: random scenarios of 200 steps and every crash,
## bounce and fault test three times
chaos:
	ONCEQ_SCENARIO_STEPS=200 $(GO) test -count=3 -timeout 3h -v \
	  -run 'TestRandomScenario|TestCrash|TestSystem|TestProtocolFaults|TestDiskFaults|TestChainedStages|TestSlowTask|TestCrashSlowTail|TestSlowTail' ./consumer

## test-crash-cluster: the crash tests on a three-node embedded broker whose
## partition leaders and coordinators move every second
test-crash-cluster:
	ONCEQ_TEST_NODES=3 ONCEQ_TEST_MOVE_LEADERS_EVERY=1s $(GO) test -count=1 -timeout 1h -v -run 'TestCrash' ./consumer
.PHONY: test-crash-cluster

## soak: one worker for an hour under steady load; memory and goroutines must stay flat
soak:
	ONCEQ_SOAK=1h $(GO) test -count=1 -timeout 2h -v -run TestSoak ./consumer

## bench-cli: every onceq bench scenario with its defaults (200,000 tasks); the
## table on stdout, JSON and HTML reports in bin/bench/<scenario>/
.PHONY: bench-cli
bench-cli: build
	@set -e; for s in produce process e2e delay chaos; do \
	  ./$(BIN) bench --scenario $$s --report bin/bench/$$s; \
	done

clean:
	rm -rf bin onceq-data
