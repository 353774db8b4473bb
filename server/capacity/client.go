package capacity

import (
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/internal/grpcconnect"
)

// InProcessClient returns s as an in-process Connect client of
// doorman.Capacity: every call runs s's handler directly, on the caller's
// goroutine, and answers with the codes and messages a network client
// would see (a gRPC status error becomes a *connect.Error with the same
// code and message): grpcconnect.Capacity, the adapter the server serves
// s through. It is safe for concurrent use as s is. The simulator (on
// virtual time) and the tests use it; it lives here rather than in
// package server so that they need not link the composition root.
func InProcessClient(s *Service) doormanconnect.CapacityClient { return grpcconnect.Capacity{S: s} }
