package sessions

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/fixture"
	"github.com/sluice-rl/sluice/limits/copies"
	"github.com/sluice-rl/sluice/server/internal/rpc"
)

// serve serves s over grpc-go on a kernel-picked loopback port until the
// test ends, and returns a client of it.
func serve(t *testing.T, s *Service) v1.LimitsClient {
	t.Helper()
	conn := testutil.ServeGRPC(t, func(gs *grpc.Server) {
		gs.RegisterService(&v1.Limits_ServiceDesc, rpc.NewLimits(nil, s)) // the copy-limited RPCs alone
	})
	return v1.NewLimitsClient(conn)
}

// charonService serves fixture.Sandboxes() over gRPC at a fake clock, with opts'
// other fields; it returns the service, the clock and a client.
func charonService(t *testing.T, opts Options) (*Service, *testutil.Clock, v1.LimitsClient) {
	t.Helper()
	clock := testutil.NewClock(time.Unix(1_700_000_000, 0))
	opts.Now, opts.Config = clock.Now, fixture.Sandboxes()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, clock, serve(t, s)
}

func open(t *testing.T, c v1.LimitsClient) string {
	t.Helper()
	resp, err := c.OpenSession(t.Context(), &v1.OpenSessionRequest{Ttl: durationpb.New(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetTtl().AsDuration() != 5*time.Second || len(resp.GetSessionId()) < 16 {
		t.Fatalf("OpenSession: %v", resp)
	}
	return resp.GetSessionId()
}

// globalHolds sums the holds of a snapshot, over every resource.
func globalHolds(snap copies.Snapshot) int64 {
	var n int64
	for _, r := range snap.Resources {
		n += r.GlobalHolds
	}
	return n
}

// A session ends when its keep-alive stream breaks, and when its ttl
// passes without a keep-alive; each time its holds are released.
func TestCharonSessionsEnd(t *testing.T) {
	s, clock, c := charonService(t, Options{})
	ctx := t.Context()
	hold := func(session string) {
		t.Helper()
		r, err := c.Reserve(ctx, &v1.ReserveRequest{SessionId: session, Resource: "cookbook/sandboxes", Domain: "globex", Copies: 1})
		if err != nil || r.GetGranted() != 1 {
			t.Fatalf("Reserve: %v, %v", r, err)
		}
	}
	held := func() int64 { return globalHolds(s.Snapshot()) }

	// The stream: keep-alives renew; a broken stream ends the session.
	a := open(t, c)
	hold(a)
	sctx, cancel := context.WithCancel(ctx)
	stream, err := c.KeepAlive(sctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		clock.Advance(4 * time.Second) // within the 5 s ttl each time
		if err := stream.Send(&v1.KeepAliveRequest{SessionId: a}); err != nil {
			t.Fatal(err)
		}
		if resp, err := stream.Recv(); err != nil || resp.GetSessionId() != a {
			t.Fatalf("keep-alive answer: %v, %v", resp, err)
		}
		s.expireSessions(context.Background())
	}
	if held() != 1 {
		t.Fatalf("kept alive 12 s on a 5 s ttl: %d held, want 1", held())
	}
	cancel() // the client's connection to the stream breaks
	testutil.Eventually(t, 10*time.Second, "the broken stream's session to release its hold", func() bool { return held() == 0 })

	// The ttl: no keep-alive for longer than 5 s.
	b := open(t, c)
	hold(b)
	clock.Advance(4 * time.Second)
	s.expireSessions(context.Background())
	if held() != 1 {
		t.Fatal("released before its ttl")
	}
	clock.Advance(2 * time.Second)
	s.expireSessions(context.Background())
	if held() != 0 {
		t.Fatalf("%d held after the ttl passed", held())
	}
	if _, err := c.Reserve(ctx, &v1.ReserveRequest{SessionId: b, Resource: "cookbook/sandboxes", Domain: "globex"}); status.Code(err) != codes.NotFound {
		t.Errorf("Reserve in an expired session: %v, want NotFound", err)
	}
}

// 200 concurrent reserves, each in its own session, against a global
// limit of 5 never hold more than 5.
func TestCharonConcurrentReserves(t *testing.T) {
	s, _, c := charonService(t, Options{})
	var granted atomic.Int64
	var wg sync.WaitGroup
	domains := []string{"acme", "initech", "globex", "umbrella", "hooli"}
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := c.OpenSession(t.Context(), &v1.OpenSessionRequest{})
			if err != nil {
				t.Error(err)
				return
			}
			r, err := c.Reserve(t.Context(), &v1.ReserveRequest{SessionId: resp.GetSessionId(), Resource: "cookbook/sandboxes", Domain: domains[i%len(domains)]})
			if err != nil {
				t.Error(err)
				return
			}
			granted.Add(r.GetGranted())
		}()
	}
	wg.Wait()
	if g, h := granted.Load(), globalHolds(s.Snapshot()); g != 5 || h != 5 {
		t.Fatalf("200 concurrent reserves: %d granted, %d held; want exactly the global limit, 5", g, h)
	}
}

// A server holds at most MaxSessions open sessions: the next OpenSession
// is ResourceExhausted, naming the cap and the flag, and counted; a
// session that ends — closed, its keep-alive stream broken, its ttl
// passed — frees its slot.
func TestCharonMaxSessions(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, clock, c := charonService(t, Options{MaxSessions: 3, Registry: reg})
	ctx := t.Context()
	metric := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				m := mf.GetMetric()[0]
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	refused := 0
	full := func(when string) {
		t.Helper()
		_, err := c.OpenSession(ctx, &v1.OpenSessionRequest{Ttl: durationpb.New(5 * time.Second)})
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%s: a 4th session: %v, want ResourceExhausted", when, err)
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "maximum of 3 open sessions") || !strings.Contains(msg, "(Sessions.Max)") {
			t.Errorf("%s: the refusal %q does not name the cap and its Config field", when, msg)
		}
		refused++
		if got := metric("sluice_copies_sessions_refused_total"); got != float64(refused) {
			t.Errorf("%s: sluice_copies_sessions_refused_total = %v, want %d", when, got, refused)
		}
	}
	if got := metric("sluice_copies_sessions_max"); got != 3 {
		t.Errorf("sluice_copies_sessions_max = %v, want 3", got)
	}

	ids := []string{open(t, c), open(t, c), open(t, c)}
	full("3 open")

	// Closed: its slot opens one more.
	if _, err := c.CloseSession(ctx, &v1.CloseSessionRequest{SessionId: ids[0]}); err != nil {
		t.Fatal(err)
	}
	ids[0] = open(t, c)
	full("one closed, one opened")

	// The keep-alive stream broken.
	sctx, cancel := context.WithCancel(ctx)
	stream, err := c.KeepAlive(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&v1.KeepAliveRequest{SessionId: ids[1]}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	testutil.Eventually(t, 10*time.Second, "the broken stream's session to end", func() bool { return s.Stats().Sessions == 2 })
	ids[1] = open(t, c)
	full("a stream broken, one opened")

	// The ttl passed (5 s): Run's expiry ends all three.
	clock.Advance(6 * time.Second)
	s.expireSessions(context.Background())
	open(t, c)
	open(t, c)
	open(t, c)
	full("3 expired, 3 opened")
}

// MaxSessions 0 is DefaultMaxSessions; negative, no cap.
func TestMaxSessionsOption(t *testing.T) {
	for _, tc := range []struct {
		name      string
		opt, want int
	}{
		{"zero: the default", 0, DefaultMaxSessions},
		{"set", 7, 7},
		{"negative: none", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (&Service{opts: Options{MaxSessions: tc.opt}}).maxSessions(); got != tc.want {
				t.Errorf("MaxSessions %d: cap %d, want %d", tc.opt, got, tc.want)
			}
		})
	}
}
