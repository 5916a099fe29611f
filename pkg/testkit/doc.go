// Package testkit starts correx-sessions inside a test process, for the
// integration tests of services that use it: an agent runtime that sends
// session events, a dashboard that reads snapshots. It is to correx what
// nats-server's test.RunServer is to NATS: no Docker, free ports, gone when
// the test ends.
//
//	st := testkit.Start(t)                      // broker, Redis, ingest, projector, query
//	pos, _ := st.Send(ctx, `{"sessionId":"s-1","type":"SessionCreated","payload":{}}`)
//	snap, _ := st.WaitSession(ctx, "s-1", pos[0]) // folded and readable
//	c := st.Client()                              // or pkg/client against the stack
//	_, _ = c.AwaitState(ctx, "s-1", "CREATED")
//
// Start runs franz-go's kfake as the Kafka broker, miniredis as Redis (or a
// real Redis with WithRedisURL), and the ingest, projector and query services
// on 127.0.0.1 port 0; it returns once all three answer /readyz and a watch
// (GET /v1/watch) answers, and t.Cleanup stops them. Point the code under
// test at IngestURL and QueryURL, or use Client, a pkg/client client of the
// stack; Position, Snapshot and StatusError are the client's types.
// Authentication is off unless WithAuth is given; then Tokens holds bearer
// tokens for two tenants (session ids prefixed "acme:" and "globex:") and an
// admin.
//
// The projector can be restarted (RestartProjector), or killed
// (KillProjector: its unflushed work is lost, as in a crash) and started
// again (StartProjector), to test how a service behaves while snapshots lag
// behind the events it sent.
//
// The stack is the one `make run` starts (internal/devstack); this package is
// its public, test-facing face. For the services in containers from the
// project's images, see the testcontainers-go module in pkg/testkit/correx.
//
// The kit links neither the OTLP nor the Prometheus exporter (about 90
// packages with gRPC and protocol buffers, which a user's go test would
// compile): the services' /metrics answer 404 naming
// github.com/correx/sessions/otel/promexport, whose blank import in the test
// serves them, and OTEL_*_EXPORTER may select console or none only.
//
// A Stack's methods are safe for concurrent use, except that the projector
// controls (RestartProjector, KillProjector, StartProjector) serialise with
// each other.
//
// # Goroutine leak checks
//
// After Close, every goroutine of the stack has ended but two of go-redis
// (github.com/redis/go-redis/v9): each Redis client it opened starts a
// maintnotifications circuit-breaker cleanup loop that its Close does not
// stop. They hold no connection and do no work. With go.uber.org/goleak,
// ignore them:
//
//	goleak.VerifyNone(t, goleak.IgnoreTopFunction(
//		"github.com/redis/go-redis/v9/maintnotifications.(*CircuitBreakerManager).cleanupLoop"))
package testkit
