package status

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/fixture"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/status/view"
)

// site is the status site over a limits engine and a copy-limited
// resources' engine with these configurations, at clock (the services'
// engines, without the services: package status imports none; package
// server's tests show the pages over the services themselves); it
// returns the site and the engines.
func site(tb testing.TB, clock *testutil.Clock, lim *limits.Config, cp *copies.Config) (*Site, *limits.Engine, *copies.Engine) {
	tb.Helper()
	le, err := limits.New(lim, limits.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	ce, err := copies.New(cp, copies.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return New(Views{Capacity: noCapacity{}, Limits: le, Sessions: copiesView{ce}, Now: clock.Now}), le, ce
}

// noCapacity is a CapacityView of a node with no resources.
type noCapacity struct{}

func (noCapacity) Node() view.Node                { return view.Node{ID: "b", Election: "standalone"} }
func (noCapacity) ConfigView() *view.ConfigStatus { return nil }
func (noCapacity) ResourceRows(func(string) bool) ([]view.ResourceRow, int) {
	return []view.ResourceRow{}, 0
}
func (noCapacity) ResourcePage(id string) (view.ResourcePage, error) {
	return view.ResourcePage{}, fmt.Errorf("resource %q: unknown", id)
}
func (noCapacity) Ready() (bool, string) { return true, "ok" }

// copiesView is a SessionsView of a copy-limited resources' engine of
// this server's own (no fleet), as the sessions service shows its engine.
type copiesView struct{ *copies.Engine }

func (copiesView) Fleet() (view.FleetStatus, bool) { return view.FleetStatus{}, false }

// pageOf returns the body of the site's page at path, served over HTTP.
func pageOf(tb testing.TB, s *Site, path string) string {
	tb.Helper()
	srv := httptest.NewServer(handler(s))
	defer srv.Close()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return string(body)
}

// handler serves the site's pages.
func handler(s *Site) http.Handler {
	mux := http.NewServeMux()
	s.Register(mux)
	return mux
}

// bucketsSite returns a site whose engine holds n dynamic buckets of
// resource "users" (domain u0…u(n-1), u<i> granted i%7 tokens and, for
// every tenth, rejected once), and one named bucket api/small.
func bucketsSite(tb testing.TB, n int) (*Site, *testutil.Clock) {
	tb.Helper()
	tmpl := limits.Bucket{Size: 10, FillRate: 1, WaitTimeout: 0, MaxIdle: -1, MaxDebt: 0, MaxTokensPerRequest: 10}
	cfg := &limits.Config{Resources: map[string]*limits.Resource{
		"users": {Template: &tmpl},
		"api":   {Buckets: map[string]limits.Bucket{"small": {Size: 5, FillRate: 5, WaitTimeout: time.Second, MaxIdle: -1, MaxDebt: time.Second, MaxTokensPerRequest: 5}}},
	}}
	clock := testutil.NewClock(time.Unix(1_700_000_000, 0))
	s, e, _ := site(tb, clock, cfg, nil)
	for i := range n {
		d := fmt.Sprintf("u%d", i)
		if k := int64(i % 7); k > 0 {
			e.Allow(context.Background(), clock.Now(), limits.Request{Resource: "users", Domain: d, Tokens: k})
		} else {
			e.Allow(context.Background(), clock.Now(), limits.Request{Resource: "users", Domain: d, Tokens: 0, MinTokens: 0})
		}
		if i%10 == 0 {
			e.Allow(context.Background(), clock.Now(), limits.Request{Resource: "users", Domain: d, Tokens: 10})
		}
	}
	e.Allow(context.Background(), clock.Now(), limits.Request{Resource: "api", Domain: "small", Tokens: 5})
	return s, clock
}

func TestBucketsPage(t *testing.T) {
	s, clock := bucketsSite(t, 50)
	clock.Advance(2 * time.Second)
	page := func(q string) BucketsPage {
		t.Helper()
		v, _ := url.ParseQuery(q)
		p, err := s.BucketsPage(context.Background(), v)
		if err != nil {
			t.Fatalf("%q: %v", q, err)
		}
		return p
	}
	p := page("")
	if p.Total != 51 || p.Matched != 51 || len(p.Rows) != 51 || p.Rows[0].Key != "api/small" || p.Rows[1].Key != "users/u0" {
		t.Fatalf("all: total %d matched %d rows %d first %v", p.Total, p.Matched, len(p.Rows), p.Rows[0])
	}
	// api/small: 5 of 5 taken, 2 s at 5/s refilled it.
	if r := p.Rows[0]; r.Tokens != 5 || r.Fraction != 1 || r.Grants != 1 || r.IdleSeconds != 2 || r.Bucket != "named" {
		t.Errorf("api/small: %+v", r)
	}
	p = page("prefix=users/u1&sort=grants&desc=1")
	// u1, u10…u19: 11 buckets; each has one grant; ties by key.
	if p.Matched != 11 || p.Rows[0].Key != "users/u1" || p.Rows[10].Key != "users/u19" {
		t.Errorf("prefix users/u1: matched %d, rows %v…", p.Matched, p.Rows[0].Key)
	}
	// Every bucket got 2 s × 1/s back: u<i> holds min(10, 10-i%7+2).
	p = page("where=fraction<0.7&sort=tokens")
	for _, r := range p.Rows {
		if r.Fraction >= 0.7 {
			t.Fatalf("fraction<0.7 kept %+v", r)
		}
	}
	if p.Matched == 0 || p.Matched == 51 {
		t.Errorf("fraction<0.7 matched %d", p.Matched)
	}
	p = page("where=rejections>=1,fraction<=1&per_page=2&page=3&sort=key")
	if p.Matched != 5 || len(p.Rows) != 1 || p.Rows[0].Key != "users/u40" {
		t.Errorf("page 3 of 2 among the rejected: matched %d rows %v", p.Matched, p.Rows)
	}
	if len(p.Hottest) != TopBuckets || p.Hottest[0].Grants < p.Hottest[TopBuckets-1].Grants {
		t.Errorf("hottest %v", p.Hottest)
	}
	if len(p.MostRejected) != 5 || p.MostRejected[0].Rejections != 1 {
		t.Errorf("most rejected %v", p.MostRejected)
	}
	for _, q := range []string{"sort=nope", "where=fraction<<0.5", "where=key<3", "where=grants>x", "where=bogus", "page=0", "per_page=5000", "page=1000&per_page=1000"} {
		v, _ := url.ParseQuery(q)
		if _, err := s.BucketsPage(context.Background(), v); err == nil {
			t.Errorf("%q accepted", q)
		}
	}
	// Over HTTP: HTML, JSON, and a clear 400.
	srv := httptest.NewServer(handler(s))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/status/buckets?prefix=api&format=json")
	if err != nil {
		t.Fatal(err)
	}
	var got BucketsPage
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got.Matched != 1 || got.Rows[0].Domain != "small" {
		t.Fatalf("JSON: %+v, %v", got, err)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/debug/status/buckets?where=fraction%3C%3C1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad where: %d", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/debug/status/buckets?sort=fraction")
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	_, _ = fmt.Fprint(&body, resp.Status)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HTML: %s", body.String())
	}
}

// BenchmarkBucketsPage: one page of the buckets page at 1 000 000 buckets
// (the target: well under a second).
func BenchmarkBucketsPage(b *testing.B) {
	s, _ := bucketsSite(b, 1_000_000)
	q := url.Values{"where": {"fraction<0.9"}, "sort": {"tokens"}, "page": {"3"}}
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.BucketsPage(context.Background(), q); err != nil {
			b.Fatal(err)
		}
	}
}

// The buckets page describes a burst-tier domain: its tier, phase, time
// left, hits, and a tier cooling down.
// TestBucketsPageBudget: with more buckets than WalkBudget a view looks
// at WalkBudget of them, says so, and gives the store's estimate of all.
func TestBucketsPageBudget(t *testing.T) {
	s, _ := bucketsSite(t, WalkBudget+10)
	p, err := s.BucketsPage(t.Context(), url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Complete || p.Total != WalkBudget || p.Estimate != WalkBudget+11 || len(p.Rows) == 0 {
		t.Fatalf("complete %v, total %d, estimate %d, %d rows; want false, %d, %d, some", p.Complete, p.Total, p.Estimate, len(p.Rows), WalkBudget, WalkBudget+11)
	}
	if body := pageOf(t, s, "/debug/status/buckets"); !strings.Contains(body, fmt.Sprintf("the first %d buckets looked at (of about %d keys", WalkBudget, WalkBudget+11)) {
		t.Fatalf("the page does not say it looked at the first %d: %s", WalkBudget, body)
	}
}

func TestBucketsPageShowsTiers(t *testing.T) {
	repo, err := resources.Load("../../examples/charon.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := testutil.NewClock(time.Unix(1_700_000_000, 0))
	s, e, _ := site(t, clock, repo.Limits(), repo.Copies())
	for range 5 { // 3 in tier 1, then 2 in tier 2
		e.Allow(context.Background(), clock.Now(), limits.Request{Resource: "cookbook/tiers", Domain: "acme"})
	}
	clock.Advance(time.Second)
	p, err := s.BucketsPage(context.Background(), url.Values{"prefix": {"cookbook/tiers"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rows) != 1 {
		t.Fatalf("rows %+v", p.Rows)
	}
	r := p.Rows[0]
	if r.Algorithm != "burst_tiers" || r.Tier != 2 || r.TierPhase != "active" || r.TierLeftSeconds != 1 || r.TierLimit != 4 || r.TierHits != 2 {
		t.Errorf("tier 2 entered 1 s ago (active 2 s): %+v", r)
	}
	clock.Advance(2 * time.Second) // tier 2 cools down (4 s); tier 1 is current again
	p, _ = s.BucketsPage(context.Background(), url.Values{"prefix": {"cookbook/tiers"}})
	if r := p.Rows[0]; r.Tier != 1 || r.CooldownTier != 2 || r.CooldownLeftSecs != 3 {
		t.Errorf("after tier 2's active time: %+v", r)
	}
}

// The buckets page shows the copy log: holds per resource, domain, group
// and session (ids cut short), in HTML and JSON.
func TestBucketsPageShowsHolds(t *testing.T) {
	rate := &limits.Config{Resources: map[string]*limits.Resource{"api": {Default: &limits.Bucket{Size: 10, FillRate: 1, MaxTokensPerRequest: 10}}}}
	clock := testutil.NewClock(time.Unix(1_700_000_000, 0))
	s, _, ce := site(t, clock, rate, fixture.Sandboxes())
	open, err := ce.Open(clock.Now(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a := open.ID
	if len(a) <= idShown {
		t.Fatalf("session id %q: no longer than the %d digits shown", a, idShown)
	}
	if _, err := ce.Reserve(t.Context(), clock.Now(), a, "cookbook/sandboxes", "acme", 3, 3); err != nil {
		t.Fatal(err)
	}
	p, err := s.BucketsPage(context.Background(), url.Values{"prefix": {"cookbook/"}})
	if err != nil {
		t.Fatal(err)
	}
	cp := p.Copies
	if len(cp.Resources) != 1 || cp.Resources[0].GlobalHolds != 3 || len(cp.Resources[0].Domains) != 1 || cp.Resources[0].Groups[0].Holds != 3 {
		t.Fatalf("copies on the page: %+v", cp.Resources)
	}
	if len(cp.Sessions) != 1 || cp.Sessions[0].ID != a[:idShown]+"…" || cp.Sessions[0].Holds[0].Copies != 3 {
		t.Fatalf("sessions on the page: %+v (the id must be cut to %d digits)", cp.Sessions, idShown)
	}
	if p, _ := s.BucketsPage(context.Background(), url.Values{"prefix": {"other"}}); len(p.Copies.Resources)+len(p.Copies.Sessions) != 0 {
		t.Errorf("prefix other still shows %+v", p.Copies)
	}
	body := pageOf(t, s, "/debug/status/buckets")
	for _, want := range []string{`id="session-holds"`, "cookbook/sandboxes", "trusted 3 / 4", a[:idShown] + "…"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(body, a) {
		t.Error("the page shows a whole session id")
	}
}
