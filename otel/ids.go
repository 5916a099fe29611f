package correxotel

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Domain-separation tags: a span ID and a trace ID derived from the same
// session never share bytes by construction, and a later encoding can bump
// the version without colliding with IDs already exported.
const (
	spanIDDomain  = "correx.sessions/lifecycle-span-id/v1"
	traceIDDomain = "correx.sessions/lifecycle-trace-id/v1"
)

// DeriveSpanID returns the span ID of the lifecycle span for the transition
// that brought session sessionID to version: the first 8 bytes of SHA-256
// over a domain tag, the session ID's length and bytes, and the version, all
// fixed-width big-endian, so that ("ab", v) and ("a", ...) cannot collide by
// concatenation. The same inputs give the same ID in every process and
// release, which is what makes a replay after a crash re-emit the same span
// rather than a second one. It is never the invalid all-zero ID.
func DeriveSpanID(sessionID string, version uint64) trace.SpanID {
	return deriveSpanID(sessionID, "", version)
}

// deriveSpanID is DeriveSpanID(sessionID+suffix, version) without building
// the concatenation.
func deriveSpanID(sessionID, suffix string, version uint64) trace.SpanID {
	var buf [128]byte // on the stack: no allocation for usual session IDs
	return spanIDFromSum(sha256.Sum256(derivationInput(buf[:0], spanIDDomain, sessionID, suffix, version, true)))
}

// DeriveTraceID returns a trace ID for a session's lifecycle: the first 16
// bytes of SHA-256 over a domain tag (different from DeriveSpanID's) and the
// session ID's length and bytes. Use it for lifecycle spans that start a new
// root rather than continuing an ingest request's trace. It is never the
// invalid all-zero ID.
func DeriveTraceID(sessionID string) trace.TraceID {
	var buf [128]byte
	return traceIDFromSum(sha256.Sum256(derivationInput(buf[:0], traceIDDomain, sessionID, "", 0, false)))
}

// derivationInput appends to b the bytes hashed for an ID: the domain tag, a
// zero byte, the length of sessionID+suffix and its bytes, and the version.
func derivationInput(b []byte, domain, sessionID, suffix string, version uint64, withVersion bool) []byte {
	b = append(b, domain...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(len(sessionID)+len(suffix)))
	b = append(b, sessionID...)
	b = append(b, suffix...)
	if withVersion {
		b = binary.BigEndian.AppendUint64(b, version)
	}
	return b
}

// spanIDFromSum takes the first 8 bytes of sum. An all-zero prefix (odds
// 2^-64) would be the invalid span ID, so its last byte is set to 1 instead:
// still deterministic, never zero.
func spanIDFromSum(sum [sha256.Size]byte) trace.SpanID {
	var id trace.SpanID
	copy(id[:], sum[:])
	if !id.IsValid() {
		id[len(id)-1] = 1
	}
	return id
}

// traceIDFromSum is spanIDFromSum for 16 bytes.
func traceIDFromSum(sum [sha256.Size]byte) trace.TraceID {
	var id trace.TraceID
	copy(id[:], sum[:])
	if !id.IsValid() {
		id[len(id)-1] = 1
	}
	return id
}

type requestedIDsKey struct{}

// requestedIDs is what WithSpanID and WithTraceID put in a context. parent is
// the span context the context carried at that moment: the request applies
// only while the context still carries it, so spans started under the span
// that used the IDs get fresh random ones instead of repeating them.
type requestedIDs struct {
	parent  trace.SpanContext
	traceID trace.TraceID
	spanID  trace.SpanID
}

// WithSpanID returns a context in which the next span started (with a
// TracerProvider from this package) gets span ID id instead of a random one.
// Lifecycle spans use it with DeriveSpanID so that replaying a transition
// re-emits the same span.
//
// The request holds for spans started directly from the returned context;
// spans started from the context that such a span returns (its children) get
// random IDs again. Starting two spans from the returned context gives both
// the same ID: start exactly one. An invalid (zero) id is ignored.
func WithSpanID(ctx context.Context, id trace.SpanID) context.Context {
	req := liveRequest(ctx)
	req.spanID = id
	req.parent = trace.SpanContextFromContext(ctx)
	return context.WithValue(ctx, requestedIDsKey{}, req)
}

// WithTraceID is WithSpanID for the trace ID. It applies only to a span that
// starts a new trace: one whose context carries no valid span context, or one
// started with trace.WithNewRoot(). A span with a parent always joins its
// parent's trace. An invalid (zero) id is ignored.
func WithTraceID(ctx context.Context, id trace.TraceID) context.Context {
	req := liveRequest(ctx)
	req.traceID = id
	req.parent = trace.SpanContextFromContext(ctx)
	return context.WithValue(ctx, requestedIDsKey{}, req)
}

// liveRequest returns the IDs requested in ctx if they still apply to the
// next span started from ctx, and the zero value otherwise.
//
// They apply while ctx carries the same span context as when they were
// requested. The SDK starts a new root by replacing the context's span
// context with the zero one, so a zero span context applies too. The span ID
// check catches a request made with a span's own ID in a context holding
// that span.
func liveRequest(ctx context.Context) requestedIDs {
	req, ok := ctx.Value(requestedIDsKey{}).(requestedIDs)
	if !ok {
		return requestedIDs{}
	}
	sc := trace.SpanContextFromContext(ctx)
	if sc.IsValid() && (!sc.Equal(req.parent) || sc.SpanID() == req.spanID) {
		return requestedIDs{}
	}
	return req
}

// idGenerator is random, like the SDK's default, except where the context
// carries a live request from WithSpanID or WithTraceID.
type idGenerator struct{}

var _ sdktrace.IDGenerator = idGenerator{}

// NewIDs implements sdktrace.IDGenerator; the SDK calls it for a span that
// starts a new trace.
func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	req := liveRequest(ctx)
	tid, sid := req.traceID, req.spanID
	if !tid.IsValid() {
		tid = randomTraceID()
	}
	if !sid.IsValid() {
		sid = randomSpanID()
	}
	return tid, sid
}

// NewSpanID implements sdktrace.IDGenerator; the SDK calls it for a span that
// joins its parent's trace.
func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if sid := liveRequest(ctx).spanID; sid.IsValid() {
		return sid
	}
	return randomSpanID()
}

// randomSpanID and randomTraceID draw from math/rand/v2's global generator,
// as the SDK's default generator does: IDs must be unique, not secret, and
// the global source is safe for concurrent use.
func randomSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

func randomTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}
