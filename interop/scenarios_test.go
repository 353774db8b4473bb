package interop

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testutil"
)

// Max-min fair shares of one resource across clients of every language,
// never more than its capacity; each local limiter admitting what its
// lease allows; a release reaching the others; a clean close.
func TestFairSharesAcrossLanguages(t *testing.T) {
	t.Parallel()
	const capacity, id = 100.0, "fair/shared"
	s := startServer(t, config)
	ds := mixed(t, s, "fair", 4) // the languages in turn
	wants := []float64{10, 40, 80, 80}
	for i, d := range ds {
		d.must(map[string]any{"op": "resource", "id": id, "wants": wants[i]})
	}
	// shares waits until every remaining driver's capacity is its
	// max-min share, checking at every look that the server never leased
	// more than the capacity.
	shares := func(ds []*driver, want []float64) {
		t.Helper()
		testutil.Eventually(t, 60*time.Second, fmt.Sprintf("the shares %v", want), func() bool {
			sum := 0.0
			for _, l := range s.leases(t, id) {
				sum += l.Has
			}
			if sum > capacity+1e-9 {
				t.Fatalf("the server leased %v of %s's %v", sum, id, capacity)
			}
			for i, d := range ds {
				if !near(d.capacity(id), want[i]) {
					return false
				}
			}
			return true
		})
		// Settled: what the clients hold adds up to at most the capacity.
		sum := 0.0
		for _, d := range ds {
			sum += d.capacity(id)
		}
		if sum > capacity+1e-9 {
			t.Fatalf("the clients hold %v of %s's %v", sum, id, capacity)
		}
	}
	shares(ds, []float64{10, 30, 30, 30})

	// Each local limiter admits what its lease allows: C permits per
	// second (0.1 s of burst, and the first permit at once), all four at
	// once for 2 s.
	const seconds, burst = 2.0, 0.1
	got := make([]float64, len(ds))
	errs := make([]error, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := d.send(map[string]any{"op": "run", "id": id, "seconds": seconds})
			if err == nil && a["acquired"] == nil {
				err = fmt.Errorf("run answered %v", a)
			}
			if err == nil {
				got[i] = a["acquired"].(float64)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, d := range ds {
		c := []float64{10, 30, 30, 30}[i]
		if errs[i] != nil {
			t.Fatalf("%s: %v", d.id, errs[i])
		}
		if most := c*(seconds+burst) + 1; got[i] > most {
			t.Errorf("%s's limiter admitted %v in %v s on a lease of %v/s: more than %v", d.id, got[i], seconds, c, most)
		}
		if least := 0.8 * c * seconds; got[i] < least {
			t.Errorf("%s's limiter admitted %v in %v s on a lease of %v/s: fewer than %v", d.id, got[i], seconds, c, least)
		}
		t.Logf("%s (%s): lease %v/s, %v permits in %v s", d.id, d.lang, c, got[i], seconds)
	}

	// A release reaches the others: driver 2's 30 go to driver 1 (wants
	// 40) and driver 3 (wants 80).
	ds[2].must(map[string]any{"op": "release", "id": id})
	if code := errorCode(ds[2].call(map[string]any{"op": "capacity", "id": id})); code != "NOT_FOUND" {
		t.Errorf("capacity of a released resource: code %q, want NOT_FOUND", code)
	}
	rest := []*driver{ds[0], ds[1], ds[3]}
	shares(rest, []float64{10, 40, 50})
	for _, l := range s.leases(t, id) {
		if l.Client == ds[2].id {
			t.Errorf("the server still holds a lease for %s after its release: %+v", l.Client, l)
		}
	}

	// A clean close: ok, exit 0, and the lease given back.
	for _, d := range ds {
		d.close()
	}
	testutil.Eventually(t, 30*time.Second, "every lease given back", func() bool { return len(s.leases(t, id)) == 0 })
}

// Allow is exact across languages: a bucket of 7 tokens (refilling one
// in hours) grants exactly 7, whoever asks.
func TestAllowExactAcrossLanguages(t *testing.T) {
	t.Parallel()
	s := startServer(t, config)
	ds := mixed(t, s, "allow", len(langs))
	granted := 0.0
	for i := range 10 {
		d := ds[i%len(ds)]
		a := d.must(map[string]any{"op": "allow", "resource": "api", "domain": "exact", "tokens": 1})
		want := "OK"
		if i >= 7 {
			want = "REJECTED_TIMEOUT"
		}
		if a["status"] != want {
			t.Errorf("allow %d by %s: %v, want status %s", i+1, d.id, a, want)
		}
		granted += d.num(a, "granted")
	}
	if granted != 7 {
		t.Errorf("granted %v tokens of a 7-token bucket", granted)
	}
	a := ds[1].must(map[string]any{"op": "allow", "resource": "api", "domain": "exact", "tokens": 3})
	if a["status"] != "REJECTED_TIMEOUT" || ds[1].num(a, "granted") != 0 {
		t.Errorf("3 tokens of an empty bucket: %v", a)
	}
	if a := ds[0].must(map[string]any{"op": "allow", "resource": "nosuch", "domain": "x", "tokens": 1}); a["status"] != "REJECTED_NO_BUCKET" {
		t.Errorf("an unconfigured resource: %v, want REJECTED_NO_BUCKET", a)
	}
	for _, d := range ds {
		d.close()
	}
}

// reserve asks d for copies of sandboxes in domain and returns what was
// granted and the hold (nil for none).
func reserve(t *testing.T, d *driver, domain string, copies, least int) (float64, any) {
	t.Helper()
	a := d.must(map[string]any{"op": "reserve", "resource": "sandboxes", "domain": domain, "copies": copies, "min": least})
	return d.num(a, "granted"), a["hold"]
}

// Copies across languages under the domain limit (2) and the global
// limit (3); freed copies reach the other language; a clean close
// releases the session's copies. Every language meets the next one.
func TestCopiesAcrossLanguages(t *testing.T) {
	t.Parallel()
	for i, a := range langs {
		b, c := langs[(i+1)%len(langs)], langs[(i+2)%len(langs)]
		t.Run(a+"-"+b, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, config)
			ad := startDriver(t, a, s, "copies-"+a)
			bd := startDriver(t, b, s, "copies-"+b)
			check := func(d *driver, domain string, copies, least int, want float64) any {
				t.Helper()
				g, h := reserve(t, d, domain, copies, least)
				if g != want || (g == 0) != (h == nil) {
					t.Fatalf("%s reserving %d (min %d) in %s: granted %v, hold %v; want %v", d.id, copies, least, domain, g, h, want)
				}
				return h
			}
			h1 := check(ad, "d1", 2, 0, 2) // the domain's limit
			check(bd, "d1", 1, 0, 0)       // over the domain limit: none, no error
			h2 := check(bd, "d2", 2, 1, 1) // the global limit leaves one
			check(ad, "d3", 1, 0, 0)       // over the global limit
			bd.must(map[string]any{"op": "free", "hold": h2})
			check(ad, "d3", 1, 0, 1) // b's copy reached a
			ad.must(map[string]any{"op": "free", "hold": h1})
			check(bd, "d1", 2, 0, 2) // a's reached b
			if code := errorCode(ad.call(map[string]any{"op": "free", "hold": h1})); code != "NOT_FOUND" {
				t.Errorf("freeing a hold twice: code %q, want NOT_FOUND", code)
			}
			// Closing releases everything each session held: a newcomer gets the
			// whole global limit.
			ad.close()
			bd.close()
			nd := startDriver(t, c, s, "copies-newcomer-"+c)
			check(nd, "d5", 2, 0, 2)
			check(nd, "d6", 1, 0, 1)
			nd.close()
		})
	}
}

// A killed client's copies come back when its session ends (its
// keep-alive stream broken, or its ttl passed).
func TestKilledClientsCopiesComeBack(t *testing.T) {
	t.Parallel()
	for i, victim := range langs {
		t.Run(victim, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, config)
			other := langs[(i+1)%len(langs)]
			v := startDriver(t, victim, s, "victim-"+victim)
			o := startDriver(t, other, s, "survivor-"+other)
			if g, _ := reserve(t, v, "d1", 2, 0); g != 2 {
				t.Fatalf("victim reserved %v of 2", g)
			}
			if g, _ := reserve(t, v, "d2", 1, 0); g != 1 {
				t.Fatalf("victim reserved %v of 1", g)
			}
			if g, _ := reserve(t, o, "d3", 1, 0); g != 0 {
				t.Fatalf("over the global limit the survivor got %v", g)
			}
			v.kill()
			var h any
			took := testutil.Eventually(t, 30*time.Second, "the killed client's copies to come back", func() bool {
				var g float64
				g, h = reserve(t, o, "d3", 3, 1)
				return g > 0
			})
			o.must(map[string]any{"op": "free", "hold": h})
			if g, _ := reserve(t, o, "d3", 2, 0); g != 2 {
				t.Errorf("after the kill the survivor reserved %v of 2 (domain limit)", g)
			}
			t.Logf("%s killed: its copies came back to %s after %v", victim, other, took.Round(time.Millisecond))
			o.close()
		})
	}
}

// Bad input is answered with the right code, the same in every language,
// and the driver keeps serving.
func TestBadInputAcrossLanguages(t *testing.T) {
	t.Parallel()
	s := startServer(t, config)
	cases := []struct {
		name string
		cmd  map[string]any
		code string
	}{
		{"wants of -1", map[string]any{"op": "resource", "id": "fair/bad", "wants": -1}, "INVALID_ARGUMENT"},
		{"an empty resource id", map[string]any{"op": "resource", "id": "", "wants": 1}, "INVALID_ARGUMENT"},
		{"set_wants -1", map[string]any{"op": "set_wants", "id": "fair/good", "wants": -1}, "INVALID_ARGUMENT"},
		{"set_wants of an unknown resource", map[string]any{"op": "set_wants", "id": "fair/nobody", "wants": 1}, "NOT_FOUND"},
		{"a resource leased twice", map[string]any{"op": "resource", "id": "fair/good", "wants": 1}, "ALREADY_EXISTS"},
		{"allow with a bad domain", map[string]any{"op": "allow", "resource": "api", "domain": "no spaces", "tokens": 1}, "INVALID_ARGUMENT"},
		{"reserve 0 copies", map[string]any{"op": "reserve", "resource": "sandboxes", "domain": "d", "copies": 0, "min": 0}, "INVALID_ARGUMENT"},
		{"reserve an unknown resource", map[string]any{"op": "reserve", "resource": "nosuch", "domain": "d", "copies": 1, "min": 0}, "NOT_FOUND"},
		{"reserve a token bucket", map[string]any{"op": "reserve", "resource": "api", "domain": "exact", "copies": 1, "min": 0}, "FAILED_PRECONDITION"},
		{"free an unknown hold", map[string]any{"op": "free", "hold": 99}, "NOT_FOUND"},
		{"an unknown op", map[string]any{"op": "bogus"}, "INVALID_ARGUMENT"},
	}
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			d := startDriver(t, lang, s, "bad-"+lang)
			d.must(map[string]any{"op": "resource", "id": "fair/good", "wants": 5})
			for _, tc := range cases {
				if got := errorCode(d.call(tc.cmd)); got != tc.code {
					t.Errorf("%s: code %q, want %s", tc.name, got, tc.code)
				}
			}
			// Still serving.
			testutil.Eventually(t, 30*time.Second, "fair/good's lease", func() bool { return near(d.capacity("fair/good"), 5) })
			d.close()
		})
	}
}

// One client's 1000 leased resources are refreshed with one bulk
// GetCapacity per refresh interval (5 s), in every language.
func TestRefreshTrafficOf1000Resources(t *testing.T) {
	t.Parallel()
	const n, interval = 1000, 5 * time.Second
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, config)
			d := startDriver(t, lang, s, "bulk-"+lang)
			for i := range n {
				d.must(map[string]any{"op": "resource", "id": fmt.Sprintf("bulk/%d", i), "wants": 1})
			}
			testutil.Eventually(t, 60*time.Second, "the last lease", func() bool { return near(d.capacity(fmt.Sprintf("bulk/%d", n-1)), 1) })
			for i := range n {
				if c := d.capacity(fmt.Sprintf("bulk/%d", i)); !near(c, 1) {
					t.Fatalf("bulk/%d: capacity %v, want its lease of 1", i, c)
				}
			}
			// Resources added one by one go out at once, each alone; after
			// a refresh interval they travel together.
			time.Sleep(interval + time.Second)
			before := s.getCapacityRequests(t)
			time.Sleep(2*interval + 500*time.Millisecond)
			got := s.getCapacityRequests(t) - before
			t.Logf("%s: %d GetCapacity requests in %v for %d resources (refresh interval %v)", lang, got, 2*interval+500*time.Millisecond, n, interval)
			if got < 1 || got > 3 {
				t.Errorf("%s: %d GetCapacity requests in two refresh intervals for %d resources; want one bulk request per interval (2, at most 3)", lang, got, n)
			}
			d.close()
		})
	}
}

// TLS and mTLS: every language's driver speaks to a server that requires
// client certificates; without one it is refused.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	certs := testutil.MakeCerts(t)
	s := startServer(t, config, "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--tls-client-ca", certs.CA)
	for _, lang := range langs {
		t.Run(lang, func(t *testing.T) {
			d := startDriver(t, lang, s, "tls-"+lang, "--tls-ca", certs.CA, "--tls-cert", certs.ClientCert, "--tls-key", certs.ClientKey)
			d.must(map[string]any{"op": "resource", "id": "fair/tls", "wants": 10})
			testutil.Eventually(t, 30*time.Second, "a lease over mTLS", func() bool { return d.capacity("fair/tls") > 0 })
			if a := d.must(map[string]any{"op": "allow", "resource": "nosuch", "domain": "x", "tokens": 1}); a["status"] != "REJECTED_NO_BUCKET" {
				t.Errorf("allow over mTLS: %v", a)
			}
			d.close()

			anon := startDriver(t, lang, s, "anon-"+lang, "--tls-ca", certs.CA)
			if code := errorCode(anon.call(map[string]any{"op": "allow", "resource": "nosuch", "domain": "x", "tokens": 1})); code != "UNAVAILABLE" {
				t.Errorf("allow without a client certificate: code %q, want UNAVAILABLE", code)
			}
			anon.close()
		})
	}
}
