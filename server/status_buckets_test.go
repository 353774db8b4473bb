package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits"
)

// bucketsServer returns a server whose engine holds n dynamic buckets of
// resource "users" (domain u0…u(n-1), u<i> granted i%7 tokens and, for
// every tenth, rejected once), and one named bucket api/small.
func bucketsServer(tb testing.TB, n int) (*Server, *testutil.Clock) {
	tb.Helper()
	tmpl := limits.Bucket{Size: 10, FillRate: 1, WaitTimeout: 0, MaxIdle: -1, MaxDebt: 0, MaxTokensPerRequest: 10}
	cfg := &limits.Config{Resources: map[string]*limits.Resource{
		"users": {Template: &tmpl},
		"api":   {Buckets: map[string]limits.Bucket{"small": {Size: 5, FillRate: 5, WaitTimeout: time.Second, MaxIdle: -1, MaxDebt: time.Second, MaxTokensPerRequest: 5}}},
	}}
	clock := testutil.NewClock(time.Unix(1_700_000_000, 0))
	s := New(Options{ID: "b", Now: clock.Now, Limits: cfg})
	e := s.Limits()
	for i := range n {
		d := fmt.Sprintf("u%d", i)
		if k := int64(i % 7); k > 0 {
			e.Allow(tb.Context(), clock.Now(), limits.Request{Resource: "users", Domain: d, Tokens: k})
		} else {
			e.Allow(tb.Context(), clock.Now(), limits.Request{Resource: "users", Domain: d, Tokens: 0, MinTokens: 0})
		}
		if i%10 == 0 {
			e.Allow(tb.Context(), clock.Now(), limits.Request{Resource: "users", Domain: d, Tokens: 10})
		}
	}
	e.Allow(tb.Context(), clock.Now(), limits.Request{Resource: "api", Domain: "small", Tokens: 5})
	return s, clock
}

func TestBucketsPage(t *testing.T) {
	s, clock := bucketsServer(t, 50)
	clock.Advance(2 * time.Second)
	page := func(q string) BucketsPage {
		t.Helper()
		v, _ := url.ParseQuery(q)
		p, err := s.BucketsPage(t.Context(), v)
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
		if _, err := s.BucketsPage(t.Context(), v); err == nil {
			t.Errorf("%q accepted", q)
		}
	}
	// Over HTTP: HTML, JSON, and a clear 400.
	srv := httptest.NewServer(s.Handler())
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
// (the issue asks for well under a second).
func BenchmarkBucketsPage(b *testing.B) {
	s, _ := bucketsServer(b, 1_000_000)
	q := url.Values{"where": {"fraction<0.9"}, "sort": {"tokens"}, "page": {"3"}}
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.BucketsPage(b.Context(), q); err != nil {
			b.Fatal(err)
		}
	}
}
