package capacity

import (
	"fmt"
	"math"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/lease"
)

// ValidateGetCapacity checks a GetCapacity request and returns an error
// naming the offending field: an empty or oversize client_id or
// resource_id, wants or has.capacity that is NaN, ±Inf or negative, a
// resource listed twice, or more than MaxResourcesPerRequest resources.
// The server answers such a request with InvalidArgument.
func ValidateGetCapacity(m *pb.GetCapacityRequest) error {
	if err := CheckID("client_id", m.GetClientId()); err != nil {
		return err
	}
	rs := m.GetResource()
	if len(rs) > MaxResourcesPerRequest {
		return fmt.Errorf("resource: %d resources in one request, at most %d allowed", len(rs), MaxResourcesPerRequest)
	}
	seen := make(map[string]struct{}, len(rs))
	for i, r := range rs {
		field := fmt.Sprintf("resource[%d]", i)
		if err := CheckID(field+".resource_id", r.GetResourceId()); err != nil {
			return err
		}
		if _, dup := seen[r.GetResourceId()]; dup {
			return fmt.Errorf("%s.resource_id: %q appears more than once in the request", field, r.GetResourceId())
		}
		seen[r.GetResourceId()] = struct{}{}
		if err := checkAmount(field+".wants", r.GetWants()); err != nil {
			return err
		}
		if err := checkLease(field+".has", r.GetHas()); err != nil {
			return err
		}
	}
	return nil
}

// ValidateGetServerCapacity checks a GetServerCapacity request like
// ValidateGetCapacity, and also every priority band: num_clients ≥ 1 and
// wants finite and ≥ 0, at most MaxBandsPerResource bands, and its demand
// curve if it sends one (checkGroups).
func ValidateGetServerCapacity(m *pb.GetServerCapacityRequest) error {
	if err := CheckID("server_id", m.GetServerId()); err != nil {
		return err
	}
	rs := m.GetResource()
	if len(rs) > MaxResourcesPerRequest {
		return fmt.Errorf("resource: %d resources in one request, at most %d allowed", len(rs), MaxResourcesPerRequest)
	}
	seen := make(map[string]struct{}, len(rs))
	for i, r := range rs {
		field := fmt.Sprintf("resource[%d]", i)
		if err := CheckID(field+".resource_id", r.GetResourceId()); err != nil {
			return err
		}
		if _, dup := seen[r.GetResourceId()]; dup {
			return fmt.Errorf("%s.resource_id: %q appears more than once in the request", field, r.GetResourceId())
		}
		seen[r.GetResourceId()] = struct{}{}
		if err := checkLease(field+".has", r.GetHas()); err != nil {
			return err
		}
		if len(r.GetWants()) > MaxBandsPerResource {
			return fmt.Errorf("%s.wants: %d priority bands, at most %d allowed", field, len(r.GetWants()), MaxBandsPerResource)
		}
		for j, b := range r.GetWants() {
			bf := fmt.Sprintf("%s.wants[%d]", field, j)
			if b.GetNumClients() < 1 {
				return fmt.Errorf("%s.num_clients: %d, must be at least 1", bf, b.GetNumClients())
			}
			if err := checkAmount(bf+".wants", b.GetWants()); err != nil {
				return err
			}
			if err := checkGroups(bf, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkGroups checks a band's demand curve (PriorityBandAggregate.groups,
// Sluice's extension): at most lease.MaxGroups groups, each with wants
// finite and ≥ 0 and num_clients finite and ≥ 1, summing to the band's
// wants and num_clients (within rounding: 10⁻⁶ of the wants, and half a
// client, as num_clients is a whole number on the wire).
func checkGroups(bf string, b *pb.PriorityBandAggregate) error {
	gs := b.GetGroups()
	if len(gs) > lease.MaxGroups {
		return fmt.Errorf("%s.groups: %d groups, at most %d allowed", bf, len(gs), lease.MaxGroups)
	}
	if len(gs) == 0 {
		return nil
	}
	var wants, clients float64
	for k, g := range gs {
		gf := fmt.Sprintf("%s.groups[%d]", bf, k)
		if err := checkAmount(gf+".wants", g.GetWants()); err != nil {
			return err
		}
		if n := g.GetNumClients(); !(n >= 1) || math.IsInf(n, 1) {
			return fmt.Errorf("%s.num_clients: %v, must be finite and at least 1", gf, n)
		}
		wants += g.GetWants()
		clients += g.GetNumClients()
	}
	if math.Abs(wants-b.GetWants()) > 1e-6*math.Max(1, b.GetWants()) {
		return fmt.Errorf("%s.groups: wants sum to %v, the band's wants are %v", bf, wants, b.GetWants())
	}
	if math.Abs(clients-float64(b.GetNumClients())) > 0.5 {
		return fmt.Errorf("%s.groups: num_clients sum to %v, the band's num_clients is %d", bf, clients, b.GetNumClients())
	}
	return nil
}

// ValidateReleaseCapacity checks a ReleaseCapacity request: client_id
// non-empty, no resource_id oversize. Empty resource ids are allowed (the
// handler skips them): YouTube Doorman's own Go client sends, on Close, a
// list that starts with empty strings (it makes the slice with a length and
// then appends), and would retry a rejected release forever.
func ValidateReleaseCapacity(m *pb.ReleaseCapacityRequest) error {
	if err := CheckID("client_id", m.GetClientId()); err != nil {
		return err
	}
	if len(m.GetResourceId()) > MaxResourcesPerRequest {
		return fmt.Errorf("resource_id: %d resources in one request, at most %d allowed", len(m.GetResourceId()), MaxResourcesPerRequest)
	}
	for i, id := range m.GetResourceId() {
		if id == "" {
			continue
		}
		if err := CheckID(fmt.Sprintf("resource_id[%d]", i), id); err != nil {
			return err
		}
	}
	return nil
}

// CheckID checks a client, server or resource id: 1 to MaxIDLength bytes.
// The error names field.
func CheckID(field, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%s: must not be empty", field)
	case len(id) > MaxIDLength:
		return fmt.Errorf("%s: %d bytes, at most %d allowed", field, len(id), MaxIDLength)
	}
	return nil
}

func checkAmount(field string, v float64) error {
	switch {
	case math.IsNaN(v):
		return fmt.Errorf("%s: NaN is not a capacity", field)
	case math.IsInf(v, 0):
		return fmt.Errorf("%s: %v is not a finite capacity", field, v)
	case v < 0:
		return fmt.Errorf("%s: %v, must not be negative", field, v)
	}
	return nil
}

func checkLease(field string, l *pb.Lease) error {
	if l == nil {
		return nil
	}
	return checkAmount(field+".capacity", l.GetCapacity())
}
