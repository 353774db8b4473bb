package limits

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// downStore is the memory store with Take and TakeHits failing while err
// is set: a store whose Redis is down.
type downStore struct {
	*MemoryStore
	err *error
}

func (s downStore) Take(ctx context.Context, now int64, k Key, l *Limit, a Ask) (Outcome, error) {
	if *s.err != nil {
		return Outcome{}, *s.err
	}
	return s.MemoryStore.Take(ctx, now, k, l, a)
}

func (s downStore) TakeHits(ctx context.Context, now int64, k Key, l *Limit, a Ask) (HitOutcome, error) {
	if *s.err != nil {
		return HitOutcome{}, *s.err
	}
	return s.MemoryStore.TakeHits(ctx, now, k, l, a)
}

// TestOnStoreError: while the store fails, a resource with on_store_error
// open answers granted (the tokens asked, capped at the bucket's max per
// request), Degraded, with the store's error and EventDegraded; one with
// closed (the default) answers StatusServerError; both algorithms; once
// the store answers again, decisions are normal.
func TestOnStoreError(t *testing.T) {
	// limitsyaml's TestOnStoreErrorSection reads this configuration from
	// a limits section.
	bucket := DefaultBucket()
	bucket.Size, bucket.FillRate, bucket.MaxTokensPerRequest = 10, 1, 5
	plain := DefaultBucket()
	plain.Size, plain.FillRate, plain.MaxTokensPerRequest = 10, 1, 1
	tiers := []Tier{{Limit: 3, Window: time.Second, Active: time.Minute}}
	cfg := &Config{Resources: map[string]*Resource{
		"open":         {Default: bp(bucket), OnStoreError: FailOpen},
		"closed":       {Default: bp(bucket), OnStoreError: FailClosed},
		"plain":        {Buckets: map[string]Bucket{"d": plain}},
		"tiers":        {Algorithm: BurstTiers, Tiers: tiers, OnStoreError: FailOpen},
		"tiers_closed": {Algorithm: BurstTiers, Tiers: slices.Clone(tiers)},
	}}
	down := errors.New("redis: connection refused")
	var storeErr error = down
	var events []Event
	e, err := New(cfg, Options{
		Store:    downStore{NewMemoryStore(), &storeErr},
		Listener: ListenerFunc(func(ev Event) { events = append(events, ev) }),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		res      string
		tokens   int64
		degraded bool
		granted  int64
	}{
		{"open", 3, true, 3},
		{"open", 8, true, 5}, // min_tokens ≤ 5: lowered to max tokens per request
		{"closed", 3, false, 0},
		{"plain", 1, false, 0},
		{"tiers", 7, true, 7},
		{"tiers_closed", 1, false, 0},
	} {
		events = events[:0]
		req := Request{Resource: tc.res, Domain: "d", Tokens: tc.tokens, MinTokens: 1}
		d := e.Allow(t.Context(), at(0), req)
		if tc.degraded {
			if d.Status != StatusOK || !d.Degraded || d.Granted != tc.granted || d.Wait != 0 || !errors.Is(d.Err, down) {
				t.Errorf("%s: %+v, want a degraded grant of %d", tc.res, d, tc.granted)
			}
			if len(events) != 1 || events[0].Type != EventDegraded || events[0].Tokens != tc.granted || events[0].Resource != tc.res {
				t.Errorf("%s: events %+v, want one degraded", tc.res, events)
			}
			continue
		}
		if d.Status != StatusServerError || d.Degraded || !errors.Is(d.Err, down) || !d.RetryNever {
			t.Errorf("%s: %+v, want a server error", tc.res, d)
		}
		if len(events) != 1 || events[0].Type != EventServerError {
			t.Errorf("%s: events %+v, want one server_error", tc.res, events)
		}
	}

	// The store answers again: the open resource's bucket decides (the
	// degraded grants took nothing from it: 10 tokens, 5 per request).
	storeErr = nil
	for i, want := range []Status{StatusOK, StatusOK, StatusTimeout} {
		d := e.Allow(t.Context(), at(0), Request{Resource: "open", Domain: "d", Tokens: 5, MaxWait: 0, HasMaxWait: true})
		if d.Status != want || d.Degraded || d.Err != nil {
			t.Fatalf("after recovery, request %d: %+v, want %v", i, d, want)
		}
	}
}

// TestOnStoreErrorConfig: OnStoreError is FailClosed or FailOpen; anything
// else is an error naming the field (limitsyaml's
// TestOnStoreErrorSectionErrors: in YAML too).
func TestOnStoreErrorConfig(t *testing.T) {
	cfg := &Config{Resources: map[string]*Resource{"r": {Default: &Bucket{Size: 1, FillRate: 1}, OnStoreError: 7}}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "resources.r.on_store_error: OnStoreError(7), want closed or open") {
		t.Errorf("OnStoreError 7: %v", err)
	}
	for s, want := range map[string]OnStoreError{"": FailClosed, "closed": FailClosed, "open": FailOpen} {
		if got, err := ParseOnStoreError(s); got != want || err != nil {
			t.Errorf("ParseOnStoreError(%q) = %v, %v", s, got, err)
		}
		if s != "" && want.String() != s {
			t.Errorf("%v.String() = %q", want, want.String())
		}
	}
}

// TestAllowContextDone: a request whose context is done (cancelled, or
// past its deadline) takes no tokens and creates no bucket, on the memory
// store: StatusServerError with ctx.Err() wrapped (EventServerError),
// never a degraded grant, even on a resource that fails open; token
// buckets and burst tiers alike.
func TestAllowContextDone(t *testing.T) {
	// The configuration of the section
	//   open:  {default: {size: 10, fill_rate: 1}, on_store_error: open}
	//   tiers: {algorithm: burst_tiers, tiers: [{limit: 3, window: 1s, active: 1m}], on_store_error: open}
	// built in Go (limits reads no YAML).
	bucket := DefaultBucket()
	bucket.Size, bucket.FillRate, bucket.MaxTokensPerRequest = 10, 1, 1
	cfg := &Config{Resources: map[string]*Resource{
		"open":  {Default: bp(bucket), OnStoreError: FailOpen},
		"tiers": {Algorithm: BurstTiers, Tiers: []Tier{{Limit: 3, Window: time.Second, Active: time.Minute}}, OnStoreError: FailOpen},
	}}
	var events []EventType
	e, err := New(cfg, Options{Listener: ListenerFunc(func(ev Event) { events = append(events, ev.Type) })})
	if err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	expired, cancel2 := context.WithDeadline(t.Context(), time.Unix(0, 0))
	defer cancel2()
	for _, ctx := range []context.Context{canceled, expired} {
		for _, res := range []string{"open", "tiers"} {
			events = events[:0]
			d := e.Allow(ctx, at(0), Request{Resource: res, Domain: "d"})
			if d.Status != StatusServerError || d.Degraded || d.Granted != 0 || !errors.Is(d.Err, ctx.Err()) ||
				len(events) != 1 || events[0] != EventServerError {
				t.Errorf("%s, %v: %+v, events %v; want StatusServerError (not degraded), %v wrapped", res, ctx.Err(), d, events, ctx.Err())
			}
		}
	}
	if n := e.Store().(*MemoryStore).Len(); n != 0 {
		t.Fatalf("%d buckets after requests whose context was done, want 0", n)
	}
	if d := e.Allow(t.Context(), at(0), Request{Resource: "open", Domain: "d"}); d.Status != StatusOK || d.Degraded {
		t.Fatalf("a live context: %+v", d)
	}
}
