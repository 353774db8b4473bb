package testutil

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
)

// Learnt waits, through c, until each of resources (copy-limited) grants
// a reserve of one copy in domain "learnt", then gives it back: with
// peers in a fleet, a resource on a fresh Redis is in learning mode until
// every member has looked at it (about 100 ms after the last one joined;
// at most limits/redis.LearningPeriod), since Redis cannot tell fresh
// from emptied. Every answer meanwhile must be granted or Unavailable
// (else t.Fatalf); it waits at most 30 s per resource.
func Learnt(t testing.TB, c v1.LimitsClient, resources ...string) {
	t.Helper()
	open, err := c.OpenSession(t.Context(), &v1.OpenSessionRequest{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	sess := open.GetSessionId()
	defer func() { _, _ = c.CloseSession(t.Context(), &v1.CloseSessionRequest{SessionId: sess}) }()
	for _, res := range resources {
		Eventually(t, 30*time.Second, res+"'s learning period to end", func() bool {
			r, err := c.Reserve(t.Context(), &v1.ReserveRequest{SessionId: sess, Resource: res, Domain: "learnt", Copies: 1})
			if status.Code(err) == codes.Unavailable {
				return false
			}
			if err != nil || r.GetGranted() != 1 {
				t.Fatalf("reserve of %s: %v %v, want granted or Unavailable", res, r, err)
			}
			_, err = c.Release(t.Context(), &v1.ReleaseRequest{SessionId: sess, Resource: res, Domain: "learnt", Copies: 1})
			return err == nil
		})
	}
}
