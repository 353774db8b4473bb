package capacity

import (
	"net/http"

	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/internal/grpcconnect"
)

// handler serves s's RPCs over Connect (gRPC, gRPC-Web and JSON), with
// package server's adapter.
func handler(s *Service) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(doormanconnect.NewCapacityHandler(grpcconnect.Capacity{S: s}))
	return mux
}
