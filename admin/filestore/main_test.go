package filestore_test

import (
	"os"
	"testing"

	"github.com/sluice-rl/sluice/internal/testutil"
)

// TestMain silences the admin.Service's audit lines (slog's default
// logger) unless SLUICE_TEST_LOG is set.
func TestMain(m *testing.M) {
	testutil.QuietLogs()
	os.Exit(m.Run())
}
