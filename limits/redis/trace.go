package redisstore

import (
	"context"
	"net"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Tracing (Options.TracerProvider): a call of a request whose span
// records gets a client span of its own, a child of the request's, from
// the moment it is asked until its answer (its wait in the batcher's
// queue included), named after its script (db.query.summary "EVALSHA
// take"). A round trip that carries such calls gets a span too ("BATCH
// EVALSHA", db.operation.batch.size the calls it carries), a child of the
// first traced call's and linking every traced call's span, each of which
// links it back: a request's trace shows the round trip that carried it
// even when the round trip is in another request's trace. Attributes
// follow OpenTelemetry's semantic conventions for databases
// (db.system.name redis, db.operation.name, server.address,
// server.port). A call of a context with no recording span (the store's
// own background work, an untraced request) makes no span, and a round
// trip with no traced call makes none.
//
// Source: docs/tracing.md, "What a trace holds" (a batched round trip
// links the spans of the requests it carries).

// startCall starts c's span under ctx's recording span, and returns the
// context carrying it (span nil, ctx as is, when ctx's span does not
// record).
func (s *Store) startCall(ctx context.Context, c *call) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, nil
	}
	ctx, c.span = s.tracer.Start(ctx, c.sc.summary, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.DBSystemNameRedis, semconv.DBOperationName("EVALSHA"), semconv.DBQuerySummary(c.sc.summary)))
	return ctx, c.span
}

// startTrip starts the span of the round trip carrying batch, when one of
// its calls is traced, under t's context (the first call's values) and
// as a child of the first traced call; span nil otherwise.
func (b *batcher) startTrip(ctx context.Context, batch []*call) (context.Context, trace.Span) {
	var links []trace.Link
	var parent trace.Span
	for _, c := range batch {
		if c.span == nil {
			continue
		}
		if parent == nil {
			parent = c.span
		}
		links = append(links, trace.Link{SpanContext: c.span.SpanContext()})
	}
	if parent == nil {
		return ctx, nil
	}
	attrs := append([]attribute.KeyValue{semconv.DBSystemNameRedis, semconv.DBOperationName("BATCH EVALSHA"),
		semconv.DBOperationBatchSize(len(batch))}, b.peer...)
	ctx, span := b.st.tracer.Start(trace.ContextWithSpan(ctx, parent), "BATCH EVALSHA", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(links...), trace.WithAttributes(attrs...))
	back := trace.Link{SpanContext: span.SpanContext()}
	for _, c := range batch {
		if c.span != nil {
			c.span.AddLink(back) // (a no-op once its caller left: the span ended)
		}
	}
	return ctx, span
}

// endSpan ends span with err's outcome (the span's status Error with its
// message, and error.type).
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(semconv.ErrorTypeOther)
	}
	span.End()
}

// peerAttrs are server.address and server.port of a node's address
// (host:port; a name without a port is the address alone).
func peerAttrs(addr string) []attribute.KeyValue {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return []attribute.KeyValue{semconv.ServerAddress(addr)}
	}
	attrs := []attribute.KeyValue{semconv.ServerAddress(host)}
	if p, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(p))
	}
	return attrs
}
