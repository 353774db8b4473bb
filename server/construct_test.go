package server

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testutil"
)

// The etcd client New opens logs through Config.Logger: its errors reach
// the slog handler, named etcd-client; its warnings (every retried RPC)
// do not.
func TestEtcdClientLogsThroughConfigLogger(t *testing.T) {
	var buf testutil.LogBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// Nothing listens on port 1: the client dials lazily, so opening it
	// succeeds without an etcd.
	s := &Server{cfg: Config{Election: Election{Kind: "etcd"}, Etcd: Etcd{Endpoints: []string{"127.0.0.1:1"}}}, log: log, closeEtcd: func() {}}
	if err := s.openEtcd(); err != nil {
		t.Fatalf("openEtcd: %v", err)
	}
	defer s.closeEtcd()
	lg := s.etcd.GetLogger()
	lg.Warn("retrying of unary invoker failed")
	lg.Error("an etcd client error")
	got := buf.String()
	if !strings.Contains(got, `level=ERROR msg="an etcd client error" logger=etcd-client caller=`) {
		t.Errorf("Config.Logger got %q, want the etcd client's error, named etcd-client, with its caller", got)
	}
	if strings.Contains(got, "retrying") {
		t.Errorf("Config.Logger got %q, want no etcd client warning", got)
	}
}

// The drain's log tells the durations of Config.Now: on a clock that
// stands still, it took 0 s, however long the real drain did.
func TestDrainUsesConfiguredClock(t *testing.T) {
	var buf testutil.LogBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	clock := testutil.NewClock(time.Unix(1_700_000_000, 0))
	_, stop := startServer(t, Config{ID: "drain", Runtime: Runtime{Now: clock.Now, Logger: log}, Listen: Listen{Grace: 5 * time.Second}})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := buf.String(); !strings.Contains(got, `msg=stopped took=0s`) {
		t.Errorf("the drain logged %q, want msg=stopped took=0s (the configured clock's duration)", got)
	}
}
