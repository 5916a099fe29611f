# correx-sessions: `make help` lists the targets. The two that matter:
#   make run    the whole pipeline on embedded defaults
#   make test   the tests (installs redis-server and chromium first if they are missing)

GO                  ?= go
STATICCHECK_VERSION := v0.8.2
FUZZTIME            ?= 10s
export FUZZTIME
# INTEGRATION_FLAGS adds go test flags to test-integration, e.g. -run TestHappyPath.
INTEGRATION_FLAGS   ?=
# INTEGRATION_PARALLEL is how many integration scenarios run at once, each with
# its own network and containers (the suite takes about 12 minutes one at a
# time on 2 cores).
INTEGRATION_PARALLEL ?= 3

.PHONY: help deps build check test unit fuzz test-helm test-openapi lint generate bench chaos run loadgen test-integration images

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

deps: ## install what the tests need (redis-server, chromium) when it is missing
	@scripts/deps.sh

build: ## compile every package and binary, and the command line into bin/correx
	$(GO) build ./...
	$(GO) build -o bin/correx ./cmd/correx

check: ## the inner loop: gofmt, go vet, the unit tests with -short (no race detector; no end-to-end package, soaks, browser, process or long failover tests)
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) test -short -count=1 -timeout 10m $$($(GO) list $(UNIT_FIRST) ./... | grep -v /internal/e2e)

test: deps unit fuzz test-helm test-openapi ## unit and component tests (race detector), every fuzz target for FUZZTIME, the Helm chart, a client generated from the OpenAPI document

# UNIT_FIRST are the packages whose tests take longest, longest first: go test
# starts the test binaries in the order it is given them, two at a time on two
# cores, so these start at once and side by side, and the short ones fill in
# after, instead of one long package running alone at the end.
UNIT_FIRST := ./internal/e2e ./internal/projector ./internal/query ./pkg/snapshot ./internal/console

unit: ## go test -race on every package (needs redis-server; see deps), the longest first (UNIT_FIRST); the end-to-end package alone takes several minutes
	$(GO) test -race -count=1 -timeout 30m $(UNIT_FIRST) ./...

fuzz: ## run each fuzz target for FUZZTIME (default 10s)
	@scripts/fuzz.sh

test-openapi: ## generate a Go client from api/openapi.json with oapi-codegen, compile it, no enum as interface{} (its own module; builds oapi-codegen once)
	@api/codegen/test.sh

test-helm: ## render, lint and check the Helm chart (its own module; builds Helm once)
	@deploy/helm/test.sh

lint: ## gofmt, go vet, staticcheck (pinned), generated docs in sync; with the integration suites' build tag
	@out="$$(gofmt -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags integration ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags integration ./...
	$(GO) test -count=1 -run TestREADMEInSync ./pkg/fsm/internal/gendoc

generate: ## regenerate the README's lifecycle table and diagram from pkg/fsm
	$(GO) generate ./pkg/fsm

bench: deps ## every benchmark with its same-run baseline, and TestSoak at full length (CORREX_SOAK=full) (about 30 minutes with the 10-minute retention soak; figures in the README)
	CORREX_SOAK=full $(GO) test -race -count=1 -run='^TestSoak$$' -timeout 30m ./internal/e2e
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=2s ./pkg/...
	$(GO) test -run='^$$' -bench=Ingest -benchtime=3000x ./internal/ingest
	$(GO) test -run='^$$' -bench=SplitJSON -benchtime=200x ./internal/ingest
	$(GO) test -run='^$$' -bench=QueryLatency -benchtime=1x ./internal/query
	$(GO) test -run='^$$' -bench=ArchivedRead -benchtime=1x ./internal/query
	$(GO) test -run='^$$' -bench=PutHuge -benchtime=3x ./internal/archive
	$(GO) test -run='^$$' -bench=WatchChangeData -benchtime=200000x ./internal/query
	$(GO) test -run='^$$' -bench='CatchUp|Recovery|Restore|TracingOverhead|FiringLatency' -benchtime=1x -timeout 60m ./internal/projector
	$(GO) test -run='^$$' -bench=TraceHeaders -benchtime=200000x ./internal/projector
	$(GO) test -run='^$$' -bench=TombstoneMemory -benchtime=1x ./internal/projector/projstore
	$(GO) test -run='^$$' -bench='Freshness|ReadsUnderWrites' -benchtime=1x -timeout 30m ./internal/e2e
	$(GO) test -run='^$$' -bench=RetentionSoak -benchtime=1x -timeout 30m ./internal/e2e

chaos: deps ## every fault at once on seeded schedules, with the services as processes: CHAOS_RUNS runs (default 5) of CHAOS_FAULTS faults (default 12), or faults for CHAOS_DURATION each (CHAOS_DURATION=30m CHAOS_RUNS=1: 30 minutes); CHAOS_SEED replays a run (each logs its seed and schedule); CHAOS_LOGS=dir keeps a failed run's service logs
	CORREX_LOSS_RUNS=$(or $(CHAOS_RUNS),5) CORREX_CHAOS_FAULTS=$(or $(CHAOS_FAULTS),12) $(if $(CHAOS_SEED),CORREX_LOSS_SEED=$(CHAOS_SEED)) \
		$(if $(CHAOS_DURATION),CORREX_CHAOS_DURATION=$(CHAOS_DURATION)) $(if $(CHAOS_LOGS),CORREX_LOSS_LOGS=$(abspath $(CHAOS_LOGS))) \
		$(GO) test -race -count=1 -run='^TestChaos$$' -v -timeout $(if $(CHAOS_DURATION),4h,60m) ./internal/e2e

run: ## the whole pipeline on embedded defaults, with a demo workload (Ctrl-C stops it); other ports: ARGS="-ingest-addr 127.0.0.1:9181 -query-addr 127.0.0.1:9182 -projector-addr 127.0.0.1:9183 -kafka-port 9192" (ARGS=-h lists the flags)
	@$(GO) build -o .devstack/bin/devstack ./cmd/devstack
	@exec .devstack/bin/devstack $(ARGS)

loadgen: ## a verified workload against a running stack (ARGS="-sessions 5000 -rate 2000")
	$(GO) run ./cmd/loadgen $(ARGS)

images: ## build the container images from deploy/docker (CORREX_IMAGE_PREFIX, CORREX_IMAGE_TAG, KAFKA_IMAGE, REDIS_IMAGE)
	@scripts/images.sh

# With a local engine (DOCKER_HOST unset or unix://) published ports are on
# 127.0.0.1, not on the default route's gateway that testcontainers guesses
# inside a container: TESTCONTAINERS_HOST_OVERRIDE says so unless it is set
# (the suites and pkg/testkit/correx do the same).
test-integration: images ## testcontainers-go suites (integration/, pkg/testkit/correx) against the images (needs Docker)
	@if [ -z "$${TESTCONTAINERS_HOST_OVERRIDE:-}" ]; then \
		case "$${DOCKER_HOST:-unix://}" in unix://*) export TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1;; esac; \
	fi; \
	echo "TESTCONTAINERS_HOST_OVERRIDE=$${TESTCONTAINERS_HOST_OVERRIDE:-}"; \
	TESTCONTAINERS_RYUK_DISABLED=$${TESTCONTAINERS_RYUK_DISABLED:-true} \
		$(GO) test -tags integration -count=1 -timeout 60m -parallel $(INTEGRATION_PARALLEL) -v $(INTEGRATION_FLAGS) ./integration/... ./pkg/testkit/correx
