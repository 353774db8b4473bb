package copies

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// benchEngine returns an engine whose resource "r" has n domains each
// holding one copy (held by one session), and a session to bench with.
// With groups, every domain is in two of four groups.
func benchEngine(b *testing.B, n int, groups bool) (*Engine, string, []string) {
	b.Helper()
	res := Resource{DomainLimit: 10}
	if groups {
		for g := range 4 {
			res.Groups = append(res.Groups, Group{Name: "g" + strconv.Itoa(g), Limit: MaxCopies})
		}
	}
	domains := make([]string, n)
	for i := range domains {
		domains[i] = fmt.Sprintf("user-%07d", i)
		if groups {
			res.Groups[i%4].Domains = append(res.Groups[i%4].Domains, domains[i])
			res.Groups[(i+1)%4].Domains = append(res.Groups[(i+1)%4].Domains, domains[i])
		}
	}
	e, err := New(&Config{Resources: map[string]Resource{"r": res}}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	holder, _ := e.Open(t0, time.Hour)
	for _, d := range domains {
		if r, err := e.Reserve(b.Context(), t0, holder.ID, "r", d, 1, 0); err != nil || r.Granted != 1 {
			b.Fatal(r, err)
		}
	}
	s, _ := e.Open(t0, time.Hour)
	return e, s.ID, domains
}

// A Reserve+Release pair of one copy, at 1 and 100 000 domains (each
// holding a copy), visiting the domains in a scattered order; with every
// domain in two groups.
func BenchmarkReserveRelease(b *testing.B) {
	for _, groups := range []bool{false, true} {
		for _, n := range []int{1, 100_000} {
			b.Run(fmt.Sprintf("domains=%d/groups=%v", n, groups), func(b *testing.B) {
				e, s, domains := benchEngine(b, n, groups)
				names := make([][]string, len(domains))
				if groups {
					for i := range names {
						names[i] = []string{"g" + strconv.Itoa(i%4), "g" + strconv.Itoa((i+1)%4)}
					}
				}
				now := t0
				b.ReportAllocs()
				b.ResetTimer()
				i := 0
				for b.Loop() {
					i = (i + 7919) % len(domains)
					r, err := e.Reserve(b.Context(), now, s, "r", domains[i], 1, 0)
					if err != nil || r.Granted != 1 {
						b.Fatal(r, err)
					}
					if err := e.Release(b.Context(), now, s, "r", domains[i], 1, names[i]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// The same pair from every core at once (one session per goroutine):
// what the engine's one lock costs.
func BenchmarkReserveReleaseParallel(b *testing.B) {
	e, _, domains := benchEngine(b, 100_000, false)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		s, _ := e.Open(t0, time.Hour)
		i := 0
		for pb.Next() {
			i = (i + 7919) % len(domains)
			if r, err := e.Reserve(b.Context(), t0, s.ID, "r", domains[i], 1, 0); err != nil || r.Granted != 1 {
				b.Fatal(r, err)
			}
			if err := e.Release(b.Context(), t0, s.ID, "r", domains[i], 1, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A session's life: open, keep-alive, close, among 100 000 open sessions.
func BenchmarkSession(b *testing.B) {
	e, _ := New(nil, Options{})
	for range 100_000 {
		e.Open(t0, time.Hour)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s, _ := e.Open(t0, time.Minute)
		e.KeepAlive(t0, s.ID)
		e.Close(b.Context(), t0, s.ID)
	}
}

// A transfer and its seize.
func BenchmarkTransferSeize(b *testing.B) {
	e, s, domains := benchEngine(b, 1, false)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		e.Reserve(b.Context(), t0, s, "r", domains[0], 1, 0)
		tr, err := e.Transfer(b.Context(), t0, s, "r", domains[0], 1, nil, 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Seize(b.Context(), t0, s, tr.ID); err != nil {
			b.Fatal(err)
		}
		e.Release(b.Context(), t0, s, "r", domains[0], 1, nil)
	}
}
