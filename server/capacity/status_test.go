package capacity

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/status/view"
)

// The views the status pages show (package status renders them; package
// server's TestStatusPages tests the pages): the node, the configuration,
// the resources' rows and one resource's detail.
func TestStatusViews(t *testing.T) {
	s := newTestServer(t)
	getCap(t, s, "alice", "fair", 30)
	getCap(t, s, "bob", "fair", 90)
	getCap(t, s, "carol", "fixed/a", 3)
	getCap(t, s, "dave", "other", 7)
	s.Sweep()

	if n := s.View().Node(); !n.IsMaster || n.ID != "test" || n.Address != "127.0.0.1:1" || n.Master != "127.0.0.1:1" || n.Election != "standalone" || n.Parent != nil {
		t.Fatalf("node %+v", n)
	}
	if cs := s.View().ConfigView(); cs == nil || cs.Hash != s.Config().Hash() || len(cs.Templates) != 2 {
		t.Fatalf("configuration %+v", cs)
	}
	rows, total := s.View().ResourceRows(nil)
	byID := map[string]view.ResourceRow{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	if total != 3 || len(rows) != 3 {
		t.Fatalf("%d rows of %d resources, want 3 of 3: %+v", len(rows), total, rows)
	}
	if r := byID["fair"]; r.Template != "fair" || r.Capacity == nil || *r.Capacity != 100 || r.SumWants != 120 || r.SumHas != 100 || r.Clients != 2 {
		t.Fatalf("fair: %+v", r)
	}
	if r := byID["other"]; r.Template != "" || r.Capacity != nil || r.SumWants != 7 {
		t.Fatalf("unmatched resource %+v, want no template and capacity null (unlimited)", r)
	}
	if r := byID["fixed/a"]; r.Template != "fixed/*" || r.SumWants != 3 {
		t.Fatalf("fixed/a: %+v", r)
	}
	// Filtered (the status page's prefix f and regex a$): the total is
	// before filtering.
	re := regexp.MustCompile("a$")
	rows, total = s.View().ResourceRows(func(id string) bool { return strings.HasPrefix(id, "f") && re.MatchString(id) })
	if len(rows) != 1 || rows[0].ID != "fixed/a" || total != 3 {
		t.Fatalf("filtered: %+v of %d", rows, total)
	}

	// A resource's detail.
	rp, err := s.View().ResourcePage("fair")
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]float64{}
	for _, l := range rp.Leases {
		has[l.Client] = l.Has
	}
	if len(rp.Leases) != 2 || has["bob"] != 70 || has["alice"] != 30 || rp.Resource.SumWants != 120 || len(rp.History) != 1 || rp.ParentOf != "" {
		t.Fatalf("resource page: %+v", rp)
	}
	if _, err := s.View().ResourcePage("nope"); !errors.Is(err, ErrUnknownResource) {
		t.Fatalf("unknown resource: %v, want ErrUnknownResource", err)
	}
}

// The capacity service's part of package server's TestHealthAndReadiness
// (/readyz, and draining, are the server's).
func TestReady(t *testing.T) {
	s := New(Options{ID: "x", Address: "a:1", RequireConfig: true})
	if ok, why := s.Ready(); ok || !strings.Contains(why, "configuration") {
		t.Fatalf("ready without config: %v %s", ok, why)
	}
	s = newTestServer(t)
	if ok, why := s.Ready(); !ok {
		t.Fatalf("not ready: %s", why)
	}
	s.SetMastership(false, "")
	if ok, why := s.Ready(); ok || !strings.Contains(why, "mastership") {
		t.Fatalf("ready with mastership unknown: %v %s", ok, why)
	}
	s.SetMastership(false, "b:1")
	if ok, why := s.Ready(); !ok {
		t.Fatalf("not ready as a standby that knows its master: %s", why)
	}
}

// safe_capacity -1 (no limit) goes to clients as -1, and to the status
// views as -1 (which the pages show as "no limit"; package server's
// TestSafeCapacityNoLimit tests the pages).
func TestSafeCapacityNoLimit(t *testing.T) {
	repo, err := resources.Parse([]byte(`
resources:
  - identifier_glob: open
    capacity: 10
    safe_capacity: -1
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 5, learning_mode_duration: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Address: "127.0.0.1:1", Config: repo})
	if got := getCap(t, s, "a", "open", 5).GetResponse()[0].GetSafeCapacity(); got != -1 {
		t.Fatalf("safe capacity on the wire %v, want -1", got)
	}
	if cs := s.View().ConfigView(); cs == nil || len(cs.Templates) != 1 || cs.Templates[0].SafeCapacity == nil || *cs.Templates[0].SafeCapacity != resources.NoSafeCapacityLimit {
		t.Errorf("configuration view %+v, want safe capacity -1", cs)
	}
	rows, _ := s.View().ResourceRows(nil)
	if len(rows) != 1 || rows[0].SafeCapacity == nil || *rows[0].SafeCapacity != resources.NoSafeCapacityLimit {
		t.Errorf("resource rows %+v, want safe capacity -1", rows)
	}
	rp, err := s.View().ResourcePage("open")
	if err != nil || rp.Resource.SafeCapacity == nil || *rp.Resource.SafeCapacity != resources.NoSafeCapacityLimit {
		t.Errorf("resource page %+v, %v; want safe capacity -1", rp, err)
	}
}

// The status history keeps the last HistoryLength samples, oldest first.
func TestHistoryRing(t *testing.T) {
	var h history
	for i := range HistoryLength + 5 {
		h.add("r", view.Point{T: int64(i)})
	}
	got := h.get("r")
	if len(got) != HistoryLength || got[0].T != 5 || got[len(got)-1].T != HistoryLength+4 {
		t.Fatalf("%d samples from %d to %d, want %d from 5 to %d", len(got), got[0].T, got[len(got)-1].T, HistoryLength, HistoryLength+4)
	}
	for i := 1; i < len(got); i++ {
		if got[i].T != got[i-1].T+1 {
			t.Fatalf("sample %d is %d after %d", i, got[i].T, got[i-1].T)
		}
	}
	if h.get("other") != nil {
		t.Fatal("samples for a resource never added")
	}
	h.drop("r")
	if h.get("r") != nil {
		t.Fatal("samples after drop")
	}
}

// Options.Election is what the node view says of the election; "" is
// "standalone" (TestStatusViews).
func TestElectionDescription(t *testing.T) {
	s := newTestServerWith(t, Options{Election: "etcd /sluice/root at e:2379 (session TTL 10s)"})
	if got := s.View().Node().Election; got != "etcd /sluice/root at e:2379 (session TTL 10s)" {
		t.Fatalf("election %q", got)
	}
}
