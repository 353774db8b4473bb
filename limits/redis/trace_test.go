package redisstore

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits"
)

// TestTraceBatch: with a TracerProvider, a traced request's Take is a
// client span under the request's span; while a round trip is in flight
// (Redis paused), the traced Takes of five requests queue and go out as
// one round trip, whose span is a child of the first one's call and
// links all five calls, each of which links it back. An untraced Take
// makes no span.
func TestTraceBatch(t *testing.T) {
	srv := redistest.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	st := New(c, Options{Prefix: prefix(t), Timeout: time.Minute, TracerProvider: tp, callerTime: true})
	t.Cleanup(func() { _ = st.Close() })
	l := &limits.Limit{Resource: "r", Kind: limits.KindTemplate, Algorithm: limits.TokenBucket,
		Bucket: limits.Bucket{Size: 100, FillRate: 1}, Params: limits.Bucket{Size: 100, FillRate: 1}.Params(), Gen: 1}
	ctx := t.Context()
	take := func(i int) {
		t.Helper()
		if out, err := st.Take(ctx, t0.UnixNano(), limits.Key{Resource: "r", Domain: "d"}, l, limits.Ask{Tokens: 1, Min: 1}); err != nil || out.Granted != 1 {
			t.Errorf("take %d: %+v %v", i, out, err)
		}
	}
	take(-1)
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("an untraced Take made %d spans", n)
	}

	tr := tp.Tracer("test")
	var wg sync.WaitGroup
	traced := func(i int) {
		wg.Go(func() {
			rctx, span := tr.Start(ctx, "request")
			defer span.End()
			if out, err := st.Take(rctx, t0.UnixNano(), limits.Key{Resource: "r", Domain: "d"}, l, limits.Ask{Tokens: 1, Min: 1}); err != nil || out.Granted != 1 {
				t.Errorf("take %d: %+v %v", i, out, err)
			}
		})
	}
	calls0 := st.Health().Calls
	srv.Pause()
	traced(0)
	testutil.Eventually(t, 30*time.Second, "the first round trip in flight", func() bool { return st.Health().Calls == calls0+1 })
	const n = 5
	for i := 1; i <= n; i++ {
		traced(i)
	}
	testutil.Eventually(t, 30*time.Second, "five calls queued", func() bool {
		st.single.mu.Lock()
		defer st.single.mu.Unlock()
		return len(st.single.queue) == n
	})
	srv.Resume()
	wg.Wait()

	byID := map[[8]byte]sdktrace.ReadOnlySpan{}
	var trips []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		byID[s.SpanContext().SpanID()] = s
		if s.Name() == "BATCH EVALSHA" {
			trips = append(trips, s)
		}
	}
	if len(trips) != 2 {
		t.Fatalf("%d round trip spans, want 2", len(trips))
	}
	for _, trip := range trips {
		size := attr(trip.Attributes(), "db.operation.batch.size").AsInt64()
		if want := map[int64]bool{1: true, n: true}; !want[size] || int64(len(trip.Links())) != size {
			t.Errorf("a round trip of %d calls with %d links, want 1 and 1, or %d and %d", size, len(trip.Links()), n, n)
		}
		traces := map[[16]byte]bool{}
		for i, link := range trip.Links() {
			call, ok := byID[link.SpanContext.SpanID()]
			if !ok || call.Name() != "EVALSHA take" {
				t.Fatalf("link %d of the round trip is not a call's span", i)
			}
			traces[call.SpanContext().TraceID()] = true
			if i == 0 && trip.Parent().SpanID() != call.SpanContext().SpanID() {
				t.Errorf("the round trip's parent is not its first call")
			}
			if req := byID[call.Parent().SpanID()]; req == nil || req.Name() != "request" {
				t.Errorf("call %d's parent is not its request's span", i)
			}
			if ls := call.Links(); len(ls) != 1 || ls[0].SpanContext.SpanID() != trip.SpanContext().SpanID() {
				t.Errorf("call %d links %v, want its round trip", i, ls)
			}
			if a := call.Attributes(); attr(a, "db.system.name").AsString() != "redis" || attr(a, "server.port").AsInt64() == 0 {
				t.Errorf("call %d's attributes %v", i, a)
			}
		}
		if len(traces) != len(trip.Links()) {
			t.Errorf("the round trip's %d links are in %d traces, want one each", len(trip.Links()), len(traces))
		}
	}
}

func attr(kvs []attribute.KeyValue, key string) attribute.Value {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}
