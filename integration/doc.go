// Package integration holds the testcontainers-go suites: the whole pipeline
// (a Kafka-protocol broker, Redis with AOF persistence, the ingest, projector
// and query services) in containers on one Docker network per test, driven
// with load from the test process and checked only through the public HTTP
// APIs, while containers are killed, frozen, scaled and restarted.
//
// TestHappyPath starts its stack with the public testcontainers-go module,
// pkg/testkit/correx, as the suites of services that use correx do; the
// scenarios that kill, freeze, scale and restart containers drive each
// container themselves (stack_test.go). TestClusterFailover (cluster_test.go)
// runs Redis as a Cluster of three masters with one replica each, joined
// from the test process, and kills a master under load.
//
// The fault scenarios: TestProjectorKilled, TestProjectorScaling,
// TestProjectorFrozen, TestRedisRestartAndFlush, TestBrokerRestart,
// TestCheckpointBeyondLog and TestDeadlinesSurviveProjectorKill
// (scenarios_test.go); TestArchiveIntoS3 (archive_test.go: closed sessions
// leave Redis into a bucket of versitygw, an S3-compatible server in its own
// container, and are read back archived); and, in failover_test.go, TestSentinelFailover (a
// primary, a replica and three sentinels, CORREX_REDIS_WAIT_REPLICAS=1: the
// replica paused so it lags, the primary killed, the replica promoted, a new
// replica started), TestRedisRestoredFromOlderRDB (Redis without AOF
// restarted from an RDB taken earlier: the running projector notices the
// lower checkpoints and rebuilds) and TestNetworkPartitions (docker network
// disconnect of the projector from Redis, of the projector from the broker,
// and of the query service from Redis, which answers 503 problem+json
// meanwhile). Every scenario ends with every snapshot equal to the
// reference fold of what ingest acknowledged, and the failover ones log how
// long the projection took to catch up.
//
// The suites carry the build tag `integration`, so `go test ./...` skips them.
// Run them with
//
//	make test-integration   # make images, then go test -tags integration ./integration/...
//
// They need a Docker engine and the images built by `make images`
// (scripts/images.sh); nothing is pulled. Every test removes the containers,
// volumes and network it created, also when it fails (t.Cleanup); each is
// labelled correx.integration=<run id>, so leftovers of a killed run can be
// found with `docker ps -a --filter label=correx.integration`.
//
// # Environment
//
//   - CORREX_IMAGE_PREFIX (default "correx/") and CORREX_IMAGE_TAG (default
//     "dev") name the service images: PREFIX+"ingest:"+TAG and so on.
//   - KAFKA_IMAGE (default PREFIX+"kafkabroker:"+TAG) is the broker. The
//     suites know three kinds, guessed from the name or set with KAFKA_FLAVOR:
//     "kfake" (cmd/kafkabroker), "apache" (apache/kafka, KRaft single node)
//     and "redpanda" (redpandadata/redpanda in dev-container mode).
//   - REDIS_IMAGE (default PREFIX+"redis:"+TAG): the project's Redis image or
//     the official `redis` image; both take redis-server flags as arguments.
//   - TESTCONTAINERS_RYUK_DISABLED is set to true when unset: the suites clean
//     up after themselves and no reaper image is needed.
//   - TESTCONTAINERS_HOST_OVERRIDE is set to 127.0.0.1 when unset and the
//     engine is local (DOCKER_HOST unset or unix://): testcontainers' guess
//     from the default route can be an address the test process cannot
//     reach. Tests run in a container beside the engine must set it.
//   - CORREX_IT_SEED repeats a run's random choices (each test logs its seed).
//   - CORREX_IT_VERBOSE=1 shows testcontainers' own log.
//
// On failure a test prints the last 50 log lines of each of its containers and
// the differing snapshots (got and want JSON).
package integration
