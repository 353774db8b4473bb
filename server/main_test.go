package server

import (
	"os"
	"testing"

	"github.com/sluice-rl/sluice/internal/testutil"
)

// TestMain silences the servers' logs (slog's default logger) unless
// SLUICE_TEST_LOG is set. With SLUICE_CHARON_CHILD set, the test binary is
// instead a client process of a test (see charonChild).
func TestMain(m *testing.M) {
	if os.Getenv(charonChildEnv) != "" {
		os.Exit(charonChild())
	}
	testutil.QuietLogs()
	os.Exit(m.Run())
}
