package rlqsfilter_test

import (
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluice-rl/sluice/internal/rlqsfilter"
	"github.com/sluice-rl/sluice/internal/testutil"
)

// TestFilter: a bucket is tracked from its first request, reported at
// once (time_elapsed 0) and then with the whole seconds since its last
// report; assignments go to tracked buckets only; an abandon forgets it.
func TestFilter(t *testing.T) {
	clock := testutil.NewClock(t0)
	f := rlqsfilter.New(rlqsfilter.Options{NoAssignment: typev3.RateLimitStrategy_DENY_ALL, Expired: typev3.RateLimitStrategy_DENY_ALL})
	a, b := map[string]string{"name": "a"}, map[string]string{"name": "b"}
	if ok, created := f.Allow(clock.Now(), a); ok || !created {
		t.Fatalf("first request: allowed %v, created %v; want denied (DENY_ALL) and created", ok, created)
	}
	if ok, created := f.Allow(clock.Now(), a); ok || created {
		t.Fatalf("second request: allowed %v, created %v", ok, created)
	}
	us := f.Usages(clock.Now(), a)
	if len(us) != 1 || us[0].Denied != 2 || us[0].Allowed != 0 || us[0].Elapsed != 0 || us[0].ID["name"] != "a" {
		t.Fatalf("the new bucket's report: %+v", us)
	}
	if f.Assign(clock.Now(), b, bucketOf(3, 2, time.Second+1), time.Minute) {
		t.Error("an assignment for a bucket not tracked was applied")
	}
	if !f.Assign(clock.Now(), a, bucketOf(3, 2, time.Second+1), time.Minute) {
		t.Fatal("the assignment was not applied")
	}
	for range 4 {
		f.Allow(clock.Now(), a)
	}
	f.Allow(clock.Now(), b)
	clock.Advance(1700 * time.Millisecond)
	us = f.Usages(clock.Now())
	if len(us) != 2 || us[0].ID["name"] != "a" || us[0].Allowed != 3 || us[0].Denied != 1 || us[0].Elapsed != time.Second ||
		us[1].ID["name"] != "b" || us[1].Denied != 1 || us[1].Elapsed != time.Second {
		t.Fatalf("the report of every bucket, 1.7 s on: %+v", us)
	}
	if us := f.Usages(clock.Now()); us[0].Allowed+us[0].Denied != 0 {
		t.Errorf("counts not started again: %+v", us)
	}
	if st := f.Stats(); st != (rlqsfilter.Stats{Allowed: 3, Denied: 4, Bursts: 3, Assignments: 1}) {
		t.Errorf("stats %+v", st)
	}
	f.Abandon(a)
	if f.Tracked(a) || !f.Tracked(b) || f.Len() != 1 {
		t.Error("the abandon did not forget the bucket, or forgot another")
	}
	if _, ok := f.Active(clock.Now(), a); ok {
		t.Error("an abandoned bucket has an assignment")
	}
}
