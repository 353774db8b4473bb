package main

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
)

// `sluice server --max-sessions 1` (or SLUICE_MAX_SESSIONS=1) opens one
// session and refuses the second with ResourceExhausted.
func TestServerMaxSessions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   string
		flags []string
	}{
		{"flag", "", []string{"--max-sessions", "1"}},
		{"environment", "1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("SLUICE_MAX_SESSIONS", tc.env)
			}
			addr, _, _ := startServerWith(t, testConfig, tc.flags...)
			conn := testutil.Dial(t, addr)
			c := v1.NewLimitsClient(conn)
			if _, err := c.OpenSession(t.Context(), &v1.OpenSessionRequest{}); err != nil {
				t.Fatal(err)
			}
			_, err := c.OpenSession(t.Context(), &v1.OpenSessionRequest{})
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-sessions") {
				t.Fatalf("a second session at --max-sessions 1: %v, want ResourceExhausted naming the flag", err)
			}
		})
	}
}
