// Package leases is sluice.v1.Leases: the leases a capacity server
// (package capacity) decides for a holder without a request of its own,
// pushed to it on a Watch stream at once, so that capacity given back by
// one holder reaches those that want it without waiting for their next
// request (Doorman's 5-second rule bounds requests, not answers).
//
// Source: Sluice's (docs/departures.md, "Leases pushed to their holders");
// doorman-design.md's first goal, "no capacity is left unused".
package leases

import (
	"context"
	"math"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/lease"
	"github.com/sluice-rl/sluice/server/capacity"
)

// Buffer is how many pushed leases a stream holds for a holder that has
// not read them yet: one more ends the stream (the holder watches again,
// and polls meanwhile), and that lease is not recorded.
const Buffer = 64

// MaxBatch bounds the leases in one WatchResponse.
const MaxBatch = 256

// Service is sluice.v1.Leases over a capacity service. Safe for
// concurrent use; each stream holds one goroutine (its handler's) and a
// buffer of Buffer leases.
type Service struct {
	v1.UnimplementedLeasesServer
	c *capacity.Service
}

// New returns sluice.v1.Leases over c.
func New(c *capacity.Service) *Service { return &Service{c: c} }

// Watch implements v1.LeasesServer (grpc-go).
func (s *Service) Watch(req *v1.WatchRequest, stream grpc.ServerStreamingServer[v1.WatchResponse]) error {
	return s.Stream(stream.Context(), req, stream.Send)
}

// Stream serves one Watch on any transport, sending each message with
// send, until ctx ends (nil) or the watch ends: the holder id is invalid
// (InvalidArgument), the server is not the master or pushes no leases
// (FailedPrecondition), it lost mastership, another Watch for the holder
// replaced this one, or the holder fell Buffer leases behind
// (Unavailable); or send failed (its error).
func (s *Service) Stream(ctx context.Context, req *v1.WatchRequest, send func(*v1.WatchResponse) error) error {
	holder := req.GetHolderId()
	if err := capacity.CheckID("holder_id", holder); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	leases := make(chan *v1.PushedLease, Buffer)
	ended := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(ended) }) }
	w := &capacity.Watcher{
		Deliver: func(resource string, g lease.Grant) bool {
			select {
			case <-ended:
				return false
			default:
			}
			select {
			case leases <- Pushed(resource, g):
				return true
			default:
				stop() // the holder does not keep up
				return false
			}
		},
		Stop: stop,
	}
	cancel, err := s.c.Watch(holder, w)
	if err != nil {
		return status.Error(codes.FailedPrecondition, err.Error())
	}
	defer cancel()
	if err := send(&v1.WatchResponse{}); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ended:
			return status.Error(codes.Unavailable, "the watch ended (mastership lost, a newer watch of the holder, or the holder fell behind): watch again")
		case l := <-leases:
			resp := &v1.WatchResponse{Leases: []*v1.PushedLease{l}}
			for len(resp.Leases) < MaxBatch && len(leases) > 0 {
				resp.Leases = append(resp.Leases, <-leases)
			}
			if err := send(resp); err != nil {
				return err
			}
		}
	}
}

// Pushed returns g, a lease on resource, for the wire.
func Pushed(resource string, g lease.Grant) *v1.PushedLease {
	return &v1.PushedLease{
		ResourceId:      resource,
		Capacity:        g.Capacity,
		ExpiryTime:      g.Expiry.Unix(),
		RefreshInterval: int64(math.Ceil(g.RefreshInterval.Seconds())),
		Sequence:        g.Sequence,
	}
}
