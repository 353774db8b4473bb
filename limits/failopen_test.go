package limits

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
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
	section := `
resources:
  open:
    default: {size: 10, fill_rate: 1, max_tokens_per_request: 5}
    on_store_error: open
  closed:
    default: {size: 10, fill_rate: 1, max_tokens_per_request: 5}
    on_store_error: closed
  plain:
    domains: {d: {size: 10, fill_rate: 1}}
  tiers:
    algorithm: burst_tiers
    tiers: [{limit: 3, window: 1s, active: 1m}]
    on_store_error: open
  tiers_closed:
    algorithm: burst_tiers
    tiers: [{limit: 3, window: 1s, active: 1m}]
`
	cfg, err := ParseSection([]byte(section))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Resources["open"].OnStoreError != FailOpen || cfg.Resources["closed"].OnStoreError != FailClosed || cfg.Resources["plain"].OnStoreError != FailClosed {
		t.Fatalf("parsed: %+v %+v %+v", cfg.Resources["open"], cfg.Resources["closed"], cfg.Resources["plain"])
	}
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

// TestOnStoreErrorConfig: on_store_error is open or closed; anything else
// is an error naming the field, in YAML and in Go.
func TestOnStoreErrorConfig(t *testing.T) {
	_, err := ParseSection([]byte("resources:\n  r:\n    default: {size: 1, fill_rate: 1}\n    on_store_error: ajar\n"))
	if err == nil || !strings.Contains(err.Error(), `limits.resources.r.on_store_error: "ajar", want closed or open`) {
		t.Errorf("on_store_error ajar: %v", err)
	}
	_, err = ParseSection([]byte("resources:\n  r:\n    default: {size: 1, fill_rate: 1}\n    on_store_error: 1\n"))
	if err == nil || !strings.Contains(err.Error(), "limits.resources.r.on_store_error") {
		t.Errorf("on_store_error 1: %v", err)
	}
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
	// A Section round-trips the key.
	var sec Section
	if err := yaml.Unmarshal([]byte("resources:\n  r: {default: {size: 1, fill_rate: 1}, on_store_error: open}\n"), &sec); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(&sec)
	if err != nil || sec.Resources["r"].OnStoreError != "open" || !strings.Contains(string(out), "on_store_error: open") {
		t.Fatalf("section: %+v\n%s%v", sec.Resources["r"], out, err)
	}
}

// TestAllowContextDone: a request whose context is done (cancelled, or
// past its deadline) takes no tokens and creates no bucket, on the memory
// store: StatusServerError with ctx.Err() wrapped (EventServerError),
// never a degraded grant, even on a resource that fails open; token
// buckets and burst tiers alike.
func TestAllowContextDone(t *testing.T) {
	cfg, err := ParseSection([]byte(`
resources:
  open:
    default: {size: 10, fill_rate: 1}
    on_store_error: open
  tiers:
    algorithm: burst_tiers
    tiers: [{limit: 3, window: 1s, active: 1m}]
    on_store_error: open
`))
	if err != nil {
		t.Fatal(err)
	}
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
