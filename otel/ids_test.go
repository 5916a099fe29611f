package correxotel

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestDeriveSpanIDGolden(t *testing.T) {
	// Pinned: lifecycle span IDs already exported must stay the same in
	// every later release, or a replay would emit a second span. Changing
	// the encoding means a new domain tag and a migration note.
	cases := []struct {
		session string
		version uint64
		want    string
	}{
		{"", 0, "d3b8b3ff25898ea8"},
		{"0190a8f4-7a9b-7c1e-9f00-5a6b7c8d9e0f", 1, "5bcdc1d1253dab3e"},
		{"0190a8f4-7a9b-7c1e-9f00-5a6b7c8d9e0f", 2, "102d83fd46e927bc"},
	}
	for _, tc := range cases {
		if got := DeriveSpanID(tc.session, tc.version).String(); got != tc.want {
			t.Errorf("DeriveSpanID(%q, %d) = %s, want %s", tc.session, tc.version, got, tc.want)
		}
	}
	if got, want := DeriveTraceID("0190a8f4-7a9b-7c1e-9f00-5a6b7c8d9e0f").String(), "3f721b1ad31ea8565f578fac52f399e7"; got != want {
		t.Errorf("DeriveTraceID = %s, want %s", got, want)
	}
}

func TestDeriveSpanIDDistinctAndValid(t *testing.T) {
	sessions := []string{"", "a", "ab", "b", "a\x00", "0190a8f4-7a9b-7c1e-9f00-5a6b7c8d9e0f"}
	versions := []uint64{0, 1, 2, 255, 256, math.MaxUint64}
	seen := map[trace.SpanID]string{}
	for _, s := range sessions {
		for _, v := range versions {
			id := DeriveSpanID(s, v)
			if !id.IsValid() {
				t.Errorf("DeriveSpanID(%q, %d) is the invalid zero ID", s, v)
			}
			if again := DeriveSpanID(s, v); again != id {
				t.Errorf("DeriveSpanID(%q, %d) not stable: %s then %s", s, v, id, again)
			}
			if prev, dup := seen[id]; dup {
				t.Errorf("DeriveSpanID(%q, %d) = %s, same as DeriveSpanID%s", s, v, id, prev)
			}
			seen[id] = fmt.Sprintf("(%q, %d)", s, v)
		}
	}
	traces := map[trace.TraceID]string{}
	for _, s := range sessions {
		id := DeriveTraceID(s)
		if !id.IsValid() {
			t.Errorf("DeriveTraceID(%q) is the invalid zero ID", s)
		}
		if prev, dup := traces[id]; dup {
			t.Errorf("DeriveTraceID(%q) = %s, same as for %q", s, id, prev)
		}
		traces[id] = s
		var prefix trace.SpanID
		copy(prefix[:], id[:])
		if prefix == DeriveSpanID(s, 0) {
			t.Errorf("DeriveTraceID(%q) starts with DeriveSpanID(%q, 0): domains not separated", s, s)
		}
	}
}

func TestIDsFromZeroSumAreValid(t *testing.T) {
	var zero [sha256.Size]byte
	if id := spanIDFromSum(zero); !id.IsValid() {
		t.Errorf("spanIDFromSum(zero) = %s, want a valid ID", id)
	}
	if id := traceIDFromSum(zero); !id.IsValid() {
		t.Errorf("traceIDFromSum(zero) = %s, want a valid ID", id)
	}
}

func TestWithSpanIDAndTraceID(t *testing.T) {
	tel, rec, _ := NewForTest()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	tracer := tel.Tracer("correxotel.test")
	sid := DeriveSpanID("s-1", 3)
	tid := DeriveTraceID("s-1")
	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0xf7, 1},
		SpanID:     trace.SpanID{0xb7, 0xad, 1},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
	remoteCtx := trace.ContextWithRemoteSpanContext(context.Background(), remote)
	localCtx, local := tracer.Start(context.Background(), "local parent")
	defer local.End()

	cases := []struct {
		name       string
		ctx        context.Context
		opts       []trace.SpanStartOption
		wantTrace  trace.TraceID
		wantParent trace.SpanID
	}{
		{"root: both IDs", WithTraceID(WithSpanID(context.Background(), sid), tid), nil, tid, trace.SpanID{}},
		{"root: order does not matter", WithSpanID(WithTraceID(context.Background(), tid), sid), nil, tid, trace.SpanID{}},
		{"remote parent: its trace, our span ID", WithTraceID(WithSpanID(remoteCtx, sid), tid), nil, remote.TraceID(), remote.SpanID()},
		{"local parent: its trace, our span ID", WithSpanID(localCtx, sid), nil, local.SpanContext().TraceID(), local.SpanContext().SpanID()},
		{"new root under a parent", WithTraceID(WithSpanID(localCtx, sid), tid), []trace.SpanStartOption{trace.WithNewRoot()}, tid, trace.SpanID{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, span := tracer.Start(tc.ctx, "session.transition", tc.opts...)
			span.End()
			sc := span.SpanContext()
			if sc.SpanID() != sid {
				t.Errorf("span ID = %s, want %s", sc.SpanID(), sid)
			}
			if sc.TraceID() != tc.wantTrace {
				t.Errorf("trace ID = %s, want %s", sc.TraceID(), tc.wantTrace)
			}
			ended := rec.Ended()
			if got := ended[len(ended)-1]; got.SpanContext().SpanID() != sid || got.Parent().SpanID() != tc.wantParent {
				t.Errorf("recorded span %s with parent %s, want %s with parent %s",
					got.SpanContext().SpanID(), got.Parent().SpanID(), sid, tc.wantParent)
			}

			// A child, and a grandchild, of the span that used the ID must
			// not repeat it.
			childCtx, child := tracer.Start(ctx, "child")
			child.End()
			_, grandchild := tracer.Start(childCtx, "grandchild")
			grandchild.End()
			for _, s := range []trace.Span{child, grandchild} {
				if s.SpanContext().SpanID() == sid {
					t.Errorf("descendant reused the requested span ID %s", sid)
				}
				if s.SpanContext().TraceID() != sc.TraceID() {
					t.Errorf("descendant left the trace: %s, want %s", s.SpanContext().TraceID(), sc.TraceID())
				}
			}
			// A request added under the span after it started applies to
			// the next span only, not to the one already used.
			_, next := tracer.Start(WithTraceID(ctx, DeriveTraceID("other")), "next")
			next.End()
			if next.SpanContext().SpanID() == sid {
				t.Errorf("stale span ID request revived by a later WithTraceID")
			}
		})
	}
}

func TestWithSpanIDIgnoresUnusableIDs(t *testing.T) {
	tel, _, _ := NewForTest()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	tracer := tel.Tracer("correxotel.test")

	ctx := WithTraceID(WithSpanID(context.Background(), trace.SpanID{}), trace.TraceID{})
	_, span := tracer.Start(ctx, "zero")
	span.End()
	if !span.SpanContext().IsValid() {
		t.Errorf("span context %v is invalid, want random IDs in place of zero ones", span.SpanContext())
	}

	parentCtx, parent := tracer.Start(context.Background(), "parent")
	defer parent.End()
	_, child := tracer.Start(WithSpanID(parentCtx, parent.SpanContext().SpanID()), "child")
	child.End()
	if child.SpanContext().SpanID() == parent.SpanContext().SpanID() {
		t.Errorf("child took its parent's span ID %s", parent.SpanContext().SpanID())
	}
}

// TestReplayEmitsTheSameSpan is the property README's "Telemetry" states: two
// processes (a crash and a restart) emitting the lifecycle span for the same
// transition produce the same span, not two.
func TestReplayEmitsTheSameSpan(t *testing.T) {
	emit := func() trace.SpanContext {
		tel, rec, _ := NewForTest()
		defer func() { _ = tel.Shutdown(context.Background()) }()
		ctx := WithTraceID(WithSpanID(context.Background(), DeriveSpanID("s-9", 7)), DeriveTraceID("s-9"))
		_, span := tel.Tracer("projector").Start(ctx, "session.transition")
		span.End()
		if n := len(rec.Ended()); n != 1 {
			t.Fatalf("recorded %d spans, want 1", n)
		}
		return rec.Ended()[0].SpanContext()
	}
	first, replay := emit(), emit()
	if first.TraceID() != replay.TraceID() || first.SpanID() != replay.SpanID() {
		t.Errorf("replay emitted %s/%s, first run %s/%s", replay.TraceID(), replay.SpanID(), first.TraceID(), first.SpanID())
	}
}

// TestDeriveIDsDoNotAllocate: deriving a lifecycle span's IDs costs no
// garbage, and the rejection suffix derives what the concatenation would.
func TestDeriveIDsDoNotAllocate(t *testing.T) {
	const session = "0190a8f4-7a9b-7c1e-9f00-5a6b7c8d9e0f"
	if n := testing.AllocsPerRun(100, func() {
		DeriveSpanID(session, 7)
		DeriveTraceID(session)
		deriveSpanID(session, rejectedSuffix, 7)
	}); n != 0 {
		t.Errorf("%v allocations per derivation, want 0", n)
	}
	if got, want := deriveSpanID(session, rejectedSuffix, 7), DeriveSpanID(session+rejectedSuffix, 7); got != want {
		t.Errorf("deriveSpanID with a suffix = %s, want %s", got, want)
	}
}
