package rlsxds

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/xdstest"
	"github.com/sluice-rl/sluice/internal/tlsutil"
	"github.com/sluice-rl/sluice/limits/rls"
)

const testNode = "sluice-test"

// edge is a resource limiting remote_address to n per second, and unit
// SECOND unless bad (then no unit: a rule the reading refuses).
func edge(n uint32, bad bool) *rlsconfv3.RateLimitConfig {
	unit := rlsconfv3.RateLimitUnit_SECOND
	if bad {
		unit = rlsconfv3.RateLimitUnit_UNKNOWN
	}
	return &rlsconfv3.RateLimitConfig{Name: "edge-config", Domain: "edge",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "remote_address", RateLimit: policy(unit, n)}}}
}

// applied is what Apply installed last, as a test observes it.
type applied struct {
	cfg atomic.Pointer[rls.Config]
	n   atomic.Int32
}

func (a *applied) apply(c *rls.Config) error {
	a.cfg.Store(c)
	a.n.Add(1)
	return nil
}

// limit is the limit the applied rules give remote_address (0: none).
func (a *applied) limit() uint32 {
	m := a.cfg.Load().Match("edge", []rls.Entry{{Key: "remote_address", Value: "192.0.2.1"}})
	if m.Rule == nil {
		return 0
	}
	return m.Rule.Limit.RequestsPerUnit
}

// TestSourceFollowsControlPlane: a source following a real
// go-control-plane control plane over mTLS applies its rules, then a new
// version; NACKs a bad version (the control plane sees the error detail,
// not again and again) while the last good rules stay; applies the next
// good one; and survives the control plane's restart on the same port,
// taking the version it served meanwhile.
func TestSourceFollowsControlPlane(t *testing.T) {
	defer goleak.VerifyNone(t)
	certs := testutil.MakeCerts(t)
	cp := xdstest.StartMTLS(t, certs.ServerCert, certs.ServerKey, certs.CA)
	defer cp.Stop() // before goleak looks
	cp.Set(t, testNode, "1", edge(10, false))

	client, err := tlsutil.Client(certs.CA, certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	client.ServerName = "localhost" // CONFIG_GRPC_XDS_SERVER_TLS_SAN
	var got applied
	var rejected atomic.Int32
	src, err := New(Options{ServerURL: cp.Addr(), NodeID: testNode, NodeMetadata: map[string]string{"zone": "eu-1"}, TLS: client,
		Headers: map[string]string{"X-Tenant": "blue"}, RetryInterval: 100 * time.Millisecond, Logger: testutil.Logger(), Apply: got.apply,
		Rejected: func(string, error) { rejected.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	if src.Ready() || src.Version() != "" {
		t.Fatal("ready before running")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(src.Collectors()...)
	metric := func(name string, labels ...string) float64 {
		v, _ := testutil.MetricValue(t, reg, name, labels...)
		return v
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- src.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	testutil.Eventually(t, 10*time.Second, "version 1 applied", func() bool { return src.Ready() && src.Version() == "1" && got.limit() == 10 })
	if metric("sluice_envoy_xds_connected") != 1 {
		t.Error("sluice_envoy_xds_connected is not 1 with the rules received")
	}
	if err := src.Run(ctx); !errors.Is(err, ErrRunning) {
		t.Errorf("a second Run: %v, want ErrRunning", err)
	}
	testutil.Eventually(t, 10*time.Second, "version 1 acknowledged", func() bool {
		acks := cp.Acks()
		return len(acks) > 0 && acks[len(acks)-1] == "1"
	})
	headers, md := cp.Headers("x-tenant"), cp.NodeMetadata("zone")
	if len(headers) == 0 || headers[0] != "blue" || len(md) == 0 || md[0] != "eu-1" {
		t.Errorf("the control plane saw headers %q and node metadata %q, want blue and eu-1", headers, md)
	}

	cp.Set(t, testNode, "2", edge(20, false))
	testutil.Eventually(t, 10*time.Second, "version 2 applied", func() bool { return src.Version() == "2" && got.limit() == 20 })

	cp.Set(t, testNode, "3", edge(30, true))
	testutil.Eventually(t, 10*time.Second, "version 3 rejected", func() bool { return len(cp.Nacks()) > 0 })
	nacks := cp.Nacks()
	if want := `RateLimitConfig "edge-config": descriptors[0].rate_limit.unit: missing`; !strings.Contains(nacks[0], want) {
		t.Errorf("the NACK's error detail %q lacks %q", nacks[0], want)
	}
	if err := src.Err(); err == nil || !strings.Contains(err.Error(), "rate_limit.unit: missing") {
		t.Errorf("Err() = %v", err)
	}
	// go-control-plane's cache sends the rejected version again at once
	// after each NACK: the source answers at most once a RetryInterval.
	time.Sleep(time.Second)
	nacks = cp.Nacks()
	if len(nacks) > 15 {
		t.Errorf("%d NACKs within about a second with a 100 ms RetryInterval: the two sides loop", len(nacks))
	}
	if src.Version() != "2" || got.limit() != 20 || rejected.Load() != 1 {
		t.Errorf("after the rejection: version %q, limit %d, %d rejections told; want 2, 20, 1", src.Version(), got.limit(), rejected.Load())
	}
	if n := metric("sluice_envoy_xds_answers_total", "result", "nack"); n < 1 || n < float64(len(nacks)) {
		t.Errorf("sluice_envoy_xds_answers_total{result=nack} = %v; the control plane saw %d", n, len(nacks))
	}

	cp.Set(t, testNode, "4", edge(40, false))
	testutil.Eventually(t, 10*time.Second, "version 4 applied", func() bool { return src.Version() == "4" && got.limit() == 40 && src.Err() == nil })
	testutil.Eventually(t, 10*time.Second, "version 4 acknowledged", func() bool { // after the NACKs, a version no response's nonce equals
		acks := cp.Acks()
		return len(acks) > 0 && acks[len(acks)-1] == "4"
	})

	// The control plane restarts on the same port, with a new version
	// set while it was away.
	cp.Stop()
	testutil.Eventually(t, 10*time.Second, "the lost stream noticed", func() bool { return src.Err() != nil && metric("sluice_envoy_xds_connected") == 0 })
	if got.limit() != 40 || !src.Ready() {
		t.Errorf("rules lost with the control plane: limit %d, ready %v", got.limit(), src.Ready())
	}
	cp.Set(t, testNode, "5", edge(50, false))
	time.Sleep(300 * time.Millisecond) // a few failed attempts
	cp.Restart(t)
	testutil.Eventually(t, 10*time.Second, "version 5 applied after the restart", func() bool { return src.Version() == "5" && got.limit() == 50 })
	// The same rules again (a reconnection restates them): acknowledged,
	// not applied again.
	n := got.n.Load()
	cp.Set(t, testNode, "6", edge(50, false))
	testutil.Eventually(t, 10*time.Second, "version 6 acknowledged", func() bool { return src.Version() == "6" })
	if got.n.Load() != n {
		t.Errorf("equal rules applied again")
	}
}

// TestSourceStartsBeforeControlPlane: a source whose control plane is
// not there yet keeps trying, is not ready and says why, and takes the
// rules once the control plane serves; a client without the certificate
// the control plane requires never gets any.
func TestSourceStartsBeforeControlPlane(t *testing.T) {
	defer goleak.VerifyNone(t)
	certs := testutil.MakeCerts(t)
	cp := xdstest.StartMTLS(t, certs.ServerCert, certs.ServerKey, certs.CA)
	cp.Stop() // not there yet: nothing listens on its port
	defer cp.Stop()
	cp.Set(t, testNode, "a", edge(7, false))

	withCert, err := tlsutil.Client(certs.CA, certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	noCert, err := tlsutil.Client(certs.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var good, refused applied
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var sources []*Source
	for _, c := range []struct {
		tls   *tls.Config
		apply func(*rls.Config) error
	}{{withCert, good.apply}, {noCert, refused.apply}} {
		src, err := New(Options{ServerURL: cp.Addr(), NodeID: testNode, TLS: c.tls, RetryInterval: 50 * time.Millisecond, Logger: testutil.Logger(), Apply: c.apply})
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, src)
		wg.Go(func() { _ = src.Run(ctx) })
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	testutil.Eventually(t, 10*time.Second, "the dial failing", func() bool { return sources[0].Err() != nil })
	if sources[0].Ready() {
		t.Fatal("ready without a control plane")
	}
	cp.Restart(t)
	testutil.Eventually(t, 10*time.Second, "the rules applied", func() bool { return sources[0].Ready() && good.limit() == 7 })
	time.Sleep(300 * time.Millisecond)
	if sources[1].Ready() || refused.n.Load() != 0 || sources[1].Err() == nil {
		t.Errorf("a client without a certificate: ready %v, %d applied, err %v", sources[1].Ready(), refused.n.Load(), sources[1].Err())
	}
}

// TestSourceApplyRefuses: rules Apply refuses are rejected (NACK) like
// rules that cannot be read, and the source is not ready.
func TestSourceApplyRefuses(t *testing.T) {
	defer goleak.VerifyNone(t)
	certs := testutil.MakeCerts(t)
	cp := xdstest.StartMTLS(t, certs.ServerCert, certs.ServerKey, certs.CA)
	defer cp.Stop()
	cp.Set(t, testNode, "1", edge(1, false))
	client, err := tlsutil.Client(certs.CA, certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	src, err := New(Options{ServerURL: cp.Addr(), NodeID: testNode, TLS: client, RetryInterval: 50 * time.Millisecond, Logger: testutil.Logger(),
		Apply: func(*rls.Config) error { return errors.New("no room for the rules") }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	testutil.Eventually(t, 10*time.Second, "the NACK", func() bool {
		nacks := cp.Nacks()
		return len(nacks) > 0 && strings.Contains(nacks[0], "applying the rules: no room for the rules")
	})
	if src.Ready() || src.Version() != "" {
		t.Errorf("ready %v at version %q after a refusal", src.Ready(), src.Version())
	}
}

// TestNewRefuses: New names the option at fault.
func TestNewRefuses(t *testing.T) {
	apply := func(*rls.Config) error { return nil }
	for _, tc := range []struct {
		name  string
		opts  Options
		field string
	}{
		{"no server", Options{Apply: apply}, "ServerURL"},
		{"no apply", Options{ServerURL: "localhost:18000"}, "Apply"},
		{"negative retry", Options{ServerURL: "localhost:18000", Apply: apply, RetryInterval: -time.Second}, "RetryInterval"},
		{"reserved header", Options{ServerURL: "localhost:18000", Apply: apply, Headers: map[string]string{"grpc-timeout": "1"}}, "Headers"},
		{"bad header", Options{ServerURL: "localhost:18000", Apply: apply, Headers: map[string]string{"a b": "1"}}, "Headers"},
		{"empty header", Options{ServerURL: "localhost:18000", Apply: apply, Headers: map[string]string{"": "1"}}, "Headers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.opts)
			var oe *OptionError
			if !errors.As(err, &oe) || oe.Field != tc.field {
				t.Errorf("New: %v, want an OptionError naming %s", err, tc.field)
			}
		})
	}
	s, err := New(Options{ServerURL: "localhost:18000", Apply: apply})
	if err != nil || s.opts.NodeID != DefaultNodeID || s.opts.RetryInterval != DefaultRetryInterval {
		t.Errorf("defaults: %v, node %q, retry %v", err, s.opts.NodeID, s.opts.RetryInterval)
	}
	var _ *names.FieldError = (*OptionError)(nil)
}
