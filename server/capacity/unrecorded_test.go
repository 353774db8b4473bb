package capacity

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/testutil/fixture"
	"github.com/sluice-rl/sluice/resources"
)

// countingHandler counts the records whose message contains substr.
type countingHandler struct {
	substr string
	mu     sync.Mutex
	n      int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.substr) {
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
	}
	return nil
}

func (h *countingHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// TestUnrecordedLogPaced: every claim of a lease the server has no record
// of (outside learning mode) is counted, and logged at most once every
// unrecordedLogEvery of the service's clock: the first, then the first at
// least that long after the last one logged.
func TestUnrecordedLogPaced(t *testing.T) {
	repo, err := resources.Parse([]byte(fixture.Doorman))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	clk := &fakeClock{t: t0}
	logs := &countingHandler{substr: "no record of"}
	s := New(Options{Config: repo, Now: clk.now, Logger: slog.New(logs), Registry: prometheus.NewRegistry()})
	steps := []struct {
		name   string
		at     time.Duration // since t0
		logged int           // log lines so far
	}{
		{"first claim logged", 0, 1},
		{"1 s later: paced", time.Second, 1},
		{"just under the interval: paced", unrecordedLogEvery - time.Millisecond, 1},
		{"at the interval: logged", unrecordedLogEvery, 2},
		{"same instant: paced", unrecordedLogEvery, 2},
		{"after a long quiet: logged", 5 * unrecordedLogEvery, 3},
		{"1 s after that: paced", 5*unrecordedLogEvery + time.Second, 3},
		{"clock stepped back: paced", 2 * unrecordedLogEvery, 3},
	}
	for i, st := range steps {
		clk.t = t0.Add(st.at)
		// A new client each time: the server has no record of its lease.
		_, err := s.GetCapacity(context.Background(), &pb.GetCapacityRequest{
			ClientId: proto.String(fmt.Sprintf("c%d", i)),
			Resource: []*pb.ResourceRequest{{
				ResourceId: proto.String("fair"), Priority: proto.Int64(0), Wants: proto.Float64(1),
				Has: &pb.Lease{Capacity: proto.Float64(1), ExpiryTime: proto.Int64(clk.t.Add(time.Minute).Unix()), RefreshInterval: proto.Int64(5)},
			}},
		})
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := logs.count(); got != st.logged {
			t.Errorf("%s: %d log lines, want %d", st.name, got, st.logged)
		}
		if got := promtest.ToFloat64(s.metrics.unrecorded); got != float64(i+1) {
			t.Errorf("%s: sluice_server_unrecorded_has_total %v, want %d", st.name, got, i+1)
		}
	}
}
