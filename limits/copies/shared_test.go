package copies

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// downLog is a shared Log whose Redis is down while down is set, and
// which records what Restore was asked. (The Log on a real Redis is
// tested in limits/redis and fleet; this one injects the outage.)
type downLog struct {
	down     bool
	fenced   bool
	restored map[string][]Hold
	lost     []string
	learning map[string]time.Duration // Learn's answers: time left by resource
	checked  [][]LearnCheck           // what Learn was asked
}

var errDown = fmt.Errorf("redis: %w: connection refused", ErrUnavailable)

func (l *downLog) err() error {
	switch {
	case l.fenced:
		return ErrFenced
	case l.down:
		return errDown
	}
	return nil
}

func (l *downLog) Reserve(ctx context.Context, q LogReserve) (LogCounts, error) {
	if err := ctx.Err(); err != nil { // as a Log on Redis: not sent
		return LogCounts{}, fmt.Errorf("redis: %w: %w", ErrUnavailable, err)
	}
	if err := l.err(); err != nil {
		return LogCounts{}, err
	}
	if l.learning[q.Resource] > 0 && !q.Ignore {
		return LogCounts{}, fmt.Errorf("log: %w", ErrLearning)
	}
	return LogCounts{Granted: q.Copies, DomainHolds: q.Copies, GlobalHolds: q.Copies, GroupHolds: make([]int64, len(q.Groups))}, nil
}
func (l *downLog) Release(context.Context, []Hold) error { return l.err() }
func (l *downLog) Stage(context.Context, string, string, Hold, time.Duration) (time.Time, error) {
	return time.Unix(0, 0), l.err()
}
func (l *downLog) Seize(context.Context, string) (Hold, error)      { return Hold{}, l.err() }
func (l *downLog) ExpireTransfers(context.Context) ([]Ended, error) { return nil, l.err() }
func (l *downLog) Restore(_ context.Context, r string, h []Hold) error {
	if err := l.err(); err != nil {
		return err
	}
	l.restored[r] = h
	return nil
}
func (l *downLog) Lost(context.Context, []string) ([]string, error) { return l.lost, l.err() }
func (l *downLog) Epoch() string                                    { return "e1" }
func (l *downLog) Learn(_ context.Context, checks []LearnCheck) ([]time.Duration, error) {
	if err := l.err(); err != nil {
		return nil, err
	}
	l.checked = append(l.checked, checks)
	left := make([]time.Duration, len(checks))
	for i, c := range checks {
		left[i] = l.learning[c.Resource]
	}
	return left, nil
}

func sharedTestEngine(t *testing.T, l *downLog) *Engine {
	t.Helper()
	e, err := New(&Config{Resources: map[string]Resource{
		"open":   {DomainLimit: 1, OnStoreError: FailOpen},
		"closed": {DomainLimit: 1},
	}}, Options{Log: l})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestSharedLogDown: while the shared Log fails, a fail-closed resource
// refuses reserves (Unavailable), a fail-open one grants them in full,
// flagged Degraded and counted; releases succeed (the hold sets are the
// truth); once the Log answers, Reconcile writes back exactly what the
// sessions hold, once.
func TestSharedLogDown(t *testing.T) {
	l := &downLog{restored: map[string][]Hold{}}
	e := sharedTestEngine(t, l)
	now := time.Unix(100, 0)
	s, err := e.Open(now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if SessionEpoch(s.ID) != "e1" || SessionEpoch("abc") != "" {
		t.Fatalf("session %q: epoch %q, want e1", s.ID, SessionEpoch(s.ID))
	}
	if r, err := e.Reserve(t.Context(), now, s.ID, "closed", "d", 1, 1); err != nil || r.Granted != 1 || r.Degraded {
		t.Fatalf("reserve with the log up: %+v %v", r, err)
	}
	l.down = true
	if _, err := e.Reserve(t.Context(), now, s.ID, "closed", "d", 1, 1); ClassOf(err) != ClassUnavailable || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("fail-closed reserve with the log down: %v, want Unavailable", err)
	}
	r, err := e.Reserve(t.Context(), now, s.ID, "open", "d", 3, 3)
	if err != nil || r.Granted != 3 || !r.Degraded {
		t.Fatalf("fail-open reserve with the log down: %+v %v, want 3 granted, degraded", r, err)
	}
	if err := e.Release(t.Context(), now, s.ID, "closed", "d", 1, nil); err != nil {
		t.Fatalf("release with the log down: %v", err)
	}
	if err := e.Release(t.Context(), now, s.ID, "open", "d", 1, nil); err != nil {
		t.Fatalf("release with the log down: %v", err)
	}
	if got := e.Stats().Degraded; got != 1 {
		t.Errorf("Stats.Degraded %d, want 1", got)
	}
	if _, err := e.Reconcile(t.Context()); ClassOf(err) != ClassUnavailable {
		t.Fatalf("reconcile with the log down: %v", err)
	}
	l.down = false
	done, err := e.Reconcile(t.Context())
	if err != nil || fmt.Sprint(done) != "[closed open]" {
		t.Fatalf("reconcile: %v %v, want [closed open]", done, err)
	}
	if got := fmt.Sprint(l.restored); got != "map[closed:[] open:[{open d [] 2}]]" {
		t.Errorf("restored %s", got)
	}
	clear(l.restored)
	if done, err := e.Reconcile(t.Context()); err != nil || len(done) != 0 {
		t.Fatalf("second reconcile: %v %v, want nothing to do", done, err)
	}
	// A resource the log reports lost is written back.
	l.lost = []string{"open"}
	if done, _ := e.Reconcile(t.Context()); fmt.Sprint(done) != "[open]" || fmt.Sprint(l.restored) != "map[open:[{open d [] 2}]]" {
		t.Fatalf("lost: reconciled %v, restored %v", done, l.restored)
	}
}

// TestSharedLogContextDone: a reserve whose context ended fails
// (Unavailable, the context's error wrapped) rather than being granted
// fail-open: the caller gave up, the Log did not fail.
func TestSharedLogContextDone(t *testing.T) {
	l := &downLog{restored: map[string][]Hold{}}
	e := sharedTestEngine(t, l)
	now := time.Unix(100, 0)
	s, err := e.Open(now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r, err := e.Reserve(ctx, now, s.ID, "open", "d", 1, 1)
	if ClassOf(err) != ClassUnavailable || !errors.Is(err, context.Canceled) || r.Granted != 0 {
		t.Fatalf("fail-open reserve, context cancelled: %+v %v, want Unavailable wrapping context.Canceled", r, err)
	}
	if st := e.Stats(); st.Degraded != 0 || st.Granted != 0 {
		t.Fatalf("stats %+v: want nothing granted, nothing degraded", st)
	}
	if r, err := e.Reserve(t.Context(), now, s.ID, "open", "d", 1, 1); err != nil || r.Granted != 1 || r.Degraded {
		t.Fatalf("a live context: %+v %v", r, err)
	}
}

// TestSharedLogFenced: a Log that says this server was fenced fences the
// engine: its sessions are dropped, every operation is Unavailable until
// Unfence, and nothing is written back for the dropped holds.
func TestSharedLogFenced(t *testing.T) {
	l := &downLog{restored: map[string][]Hold{}}
	e := sharedTestEngine(t, l)
	now := time.Unix(100, 0)
	s, _ := e.Open(now, time.Minute)
	if _, err := e.Reserve(t.Context(), now, s.ID, "closed", "d", 1, 1); err != nil {
		t.Fatal(err)
	}
	l.fenced = true
	if _, err := e.Reserve(t.Context(), now, s.ID, "open", "d", 1, 1); ClassOf(err) != ClassUnavailable {
		t.Fatalf("reserve on a fenced log: %v, want Unavailable (even fail-open)", err)
	}
	if !e.Fenced() || e.Stats().Sessions != 0 {
		t.Fatalf("fenced %v with %d sessions, want fenced with none", e.Fenced(), e.Stats().Sessions)
	}
	for name, err := range map[string]error{
		"open":      func() error { _, err := e.Open(now, 0); return err }(),
		"keepalive": func() error { _, err := e.KeepAlive(now, s.ID); return err }(),
		"close":     func() error { _, err := e.Close(t.Context(), now, s.ID); return err }(),
		"release":   e.Release(t.Context(), now, s.ID, "closed", "d", 1, nil),
	} {
		if ClassOf(err) != ClassUnavailable {
			t.Errorf("%s while fenced: %v, want Unavailable", name, err)
		}
	}
	l.fenced = false
	e.Unfence()
	if done, err := e.Reconcile(t.Context()); err != nil || len(done) != 0 {
		t.Fatalf("reconcile after the fence: %v %v, want nothing (the holds were dropped)", done, err)
	}
	if _, err := e.KeepAlive(now, s.ID); ClassOf(err) != ClassNotFound {
		t.Fatalf("the old session after Unfence: %v, want NotFound", err)
	}
	if _, err := e.Open(now, 0); err != nil {
		t.Fatalf("open after Unfence: %v", err)
	}
}

// TestSharedLogLearning: the engine knows which resources its Log says
// are learning. Unfenced, every configured resource that keeps its limits
// is unchecked until Reconcile asks the Log (Learn, with this server's
// holdings), and a resource configured later until the next; Reconcile
// records the Log's answers, a Reserve refused as learning marks its
// resource (refused, even fail-open) and a Reserve answered clears it;
// Fence, and a Log that cannot be reached, forget everything (readiness
// does not wait for Redis); a resource that ignores its limits is never
// listed.
func TestSharedLogLearning(t *testing.T) {
	l := &downLog{restored: map[string][]Hold{}, learning: map[string]time.Duration{}}
	e := sharedTestEngine(t, l)
	ign := &Config{Resources: map[string]Resource{
		"open":   {DomainLimit: 1, OnStoreError: FailOpen},
		"closed": {DomainLimit: 1},
		"ign":    {DomainLimit: 1, Ignore: true},
	}}
	if err := e.SetConfig(ign); err != nil {
		t.Fatal(err)
	}
	now := time.Unix(100, 0)
	state := func(when, want string) {
		t.Helper()
		learning, unchecked := e.Learning()
		if got := fmt.Sprintf("learning %v unchecked %v", learning, unchecked); got != want {
			t.Fatalf("%s: %s, want %s", when, got, want)
		}
	}
	reconcile := func(when string) {
		t.Helper()
		if _, err := e.Reconcile(t.Context()); err != nil {
			t.Fatalf("%s: reconcile: %v", when, err)
		}
	}
	state("new", "learning [] unchecked [closed open]")
	e.Fence()
	state("fenced", "learning [] unchecked []")
	if _, err := e.Reconcile(t.Context()); err != nil || len(l.checked) != 0 {
		t.Fatalf("reconcile while fenced: %v, asked %v; want nothing asked", err, l.checked)
	}
	e.Unfence()
	state("unfenced", "learning [] unchecked [closed open]")
	// A log that cannot be reached says nothing: readiness does not wait
	// for Redis.
	l.down = true
	if _, err := e.Reconcile(t.Context()); ClassOf(err) != ClassUnavailable {
		t.Fatalf("reconcile with the log down: %v", err)
	}
	state("unfenced, log down", "learning [] unchecked []")
	l.down = false
	e.Fence()
	e.Unfence()
	state("unfenced again", "learning [] unchecked [closed open]")
	l.learning["closed"] = 2 * time.Second
	reconcile("closed learning")
	state("closed learning", "learning [closed] unchecked []")
	if got := fmt.Sprint(l.checked); got != "[[{closed false} {open false}]]" {
		t.Fatalf("Learn was asked %s, want closed and open, holding none", got)
	}
	s, _ := e.Open(now, time.Minute)
	if _, err := e.Reserve(t.Context(), now, s.ID, "closed", "d", 1, 1); !errors.Is(err, ErrLearning) || ClassOf(err) != ClassUnavailable {
		t.Fatalf("reserve of a learning resource: %v, want learning, Unavailable", err)
	}
	if r, err := e.Reserve(t.Context(), now, s.ID, "open", "d", 1, 1); err != nil || r.Granted != 1 {
		t.Fatal(r, err)
	}
	if r, err := e.Reserve(t.Context(), now, s.ID, "ign", "d", 1, 1); err != nil || r.Granted != 1 {
		t.Fatal(r, err)
	}
	l.learning["open"], l.learning["ign"] = time.Second, time.Second
	if r, err := e.Reserve(t.Context(), now, s.ID, "open", "d", 1, 1); !errors.Is(err, ErrLearning) || r.Degraded {
		t.Fatalf("fail-open reserve of a learning resource: %+v %v, want refused, learning, not degraded", r, err)
	}
	if r, err := e.Reserve(t.Context(), now, s.ID, "ign", "d", 1, 1); err != nil || r.Granted != 1 {
		t.Fatalf("reserve of a learning resource that ignores its limits: %+v %v, want granted", r, err)
	}
	state("refused", "learning [closed open] unchecked []")
	l.checked = nil
	delete(l.learning, "closed")
	reconcile("closed learnt")
	// closed and open were refused (dirty: restored first); this server
	// holds open and ign, whose learning mode is asked but not listed.
	if got := fmt.Sprint(l.checked); got != "[[{closed false} {ign true} {open true}]]" {
		t.Fatalf("Learn was asked %s", got)
	}
	state("closed learnt", "learning [open] unchecked []")
	delete(l.learning, "open")
	if _, err := e.Reserve(t.Context(), now, s.ID, "open", "d", 1, 1); err != nil {
		t.Fatalf("reserve of open, learnt: %v", err)
	}
	state("open answered", "learning [] unchecked []")
	l.learning["closed"] = time.Second
	reconcile("closed learning again")
	state("closed learning again", "learning [closed] unchecked []")
	l.down = true
	if _, err := e.Reconcile(t.Context()); ClassOf(err) != ClassUnavailable {
		t.Fatalf("reconcile with the log down: %v", err)
	}
	state("log down while closed learns", "learning [] unchecked []")
	l.down = false
	reconcile("closed learning, log up")
	state("closed learning, log up", "learning [closed] unchecked []")
	more := ign.Clone()
	more.Resources["new"] = Resource{DomainLimit: 1}
	delete(more.Resources, "closed")
	if err := e.SetConfig(more); err != nil {
		t.Fatal(err)
	}
	state("new resource, closed removed", "learning [] unchecked [new]")
	reconcile("new checked")
	state("new checked", "learning [] unchecked []")
	l.learning["new"] = time.Second
	reconcile("new learning")
	e.Fence()
	state("fenced again", "learning [] unchecked []")
}
