// Package correx is a testcontainers-go module that runs correx-sessions in
// Docker for the integration tests of services that use it: the Kafka
// broker, Redis, and the ingest, projector and query services, each in its
// own container on one network, started from the project's images.
//
//	c, err := correx.Run(ctx, correx.WithPartitions(3))
//	defer c.Terminate(ctx)
//	ingest, _ := c.IngestURL(ctx) // http://127.0.0.1:port
//
// It follows the testcontainers-go modules (modules/redis, modules/redpanda):
// Run takes both this package's Options and any
// testcontainers.ContainerCustomizer; Options are no-ops as customizers, and
// every other customizer is applied to each of the three service containers
// after the module's own settings (testcontainers.WithEnv to set a CORREX_*
// variable, testcontainers.WithLogConsumers to see their logs). Run returns
// once each container passes its wait strategy: the broker answers a Kafka
// ApiVersions request, Redis answers PING, and each service answers
// GET /readyz with 200 (wait.ForHTTP). Terminate removes every container and
// the network. If Run fails it removes what it had started before returning.
//
// The package is named correx, as the testcontainers-go modules are named
// for what they run (redis.Run, redpanda.Run), so that call sites read
// correx.Run. It lives under pkg/testkit beside the in-process harness
// (pkg/testkit, no Docker, milliseconds to start) and is a package of its
// own so that importing testkit does not pull in the Docker client.
//
// # Images
//
// Nothing is pulled: build the images with `make images` (scripts/images.sh)
// first. Their names come from the same variables as `make images` and the
// project's own suites, read when Run is called, and the options below
// override them:
//
//   - CORREX_IMAGE_PREFIX (default "correx/") and CORREX_IMAGE_TAG (default
//     "dev"): the services are PREFIX+"ingest:"+TAG, PREFIX+"projector:"+TAG
//     and PREFIX+"query:"+TAG.
//   - KAFKA_IMAGE (default PREFIX+"kafkabroker:"+TAG, the project's kfake
//     broker). apache/kafka and redpandadata/redpanda images are started in
//     their single-node modes; the kind is guessed from the name, or set with
//     KAFKA_FLAVOR ("kfake", "apache" or "redpanda").
//   - REDIS_IMAGE (default PREFIX+"redis:"+TAG, or the official redis image).
//
// # Environment
//
// With no reaper image available, set TESTCONTAINERS_RYUK_DISABLED=true
// (Terminate removes everything; a killed test process leaves containers
// labelled correx.testkit=<run id>).
//
// With a local engine (DOCKER_HOST unset or unix://), Run sets
// TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 for the process when it is unset:
// published ports are on the loopback address, and testcontainers' guess,
// when the process looks containerised (/.dockerenv exists, as on machines
// built from an image), is the default route's gateway, which the process
// may not reach, so every wait timed out. A remote engine, or a test run in
// a container beside the engine with its socket mounted, sets the variable
// itself.
package correx
