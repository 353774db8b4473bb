// Package admintest starts a Sluice server as `sluice server --config
// FILE` runs it, with the admin API (/admin/v1) and the quota service's
// REST API (/api) on its port, for the tests of admin/adminhttp and
// admin/quotaapi.
package admintest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/adminhttp"
	"github.com/sluice-rl/sluice/admin/filestore"
	"github.com/sluice-rl/sluice/admin/quotaapi"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server"
)

// AuditLog collects the JSON lines of a slog logger: the admin APIs' audit
// log.
type AuditLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p: an io.Writer for slog.NewJSONHandler.
func (l *AuditLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// Changes returns the audit lines ("configuration changed").
func (l *AuditLog) Changes(t *testing.T) []map[string]any {
	t.Helper()
	return l.Lines(t, "configuration changed")
}

// Lines returns the log lines whose msg is msg (the audit of a reset is
// "counters reset"), each decoded.
func (l *AuditLog) Lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.buf.String(), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// Server is a Sluice server as `sluice server --config FILE` runs it
// (the file watched and applied), with the admin API (/admin/v1) and the
// quota service's REST API (/api) on its port.
type Server struct {
	Addr string // host:port
	Path string // the configuration file
	URL  string // http://Addr, or https://
	Srv  *server.Server
	Log  *AuditLog // the admin APIs' audit lines
}

// Start writes doc to a file and starts a server watching it, with the
// admin API over the file authenticated by ao (whose Logger is set to
// the AuditLog) and with TLS when tlsCfg is set; t's cleanup stops it.
func Start(t *testing.T, doc string, ao adminhttp.AuthOptions, tlsCfg *tls.Config) *Server {
	t.Helper()
	ts := &Server{Path: filepath.Join(t.TempDir(), "config.yaml"), Log: &AuditLog{}}
	if err := os.WriteFile(ts.Path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(ts.Log, nil))
	srv, err := server.New(context.Background(), server.Config{ID: "admin-test", Runtime: server.Runtime{Logger: testutil.Logger()}})
	if err != nil {
		t.Fatal(err)
	}
	ts.Srv = srv
	apply := func(r *resources.Repository) {
		ts.Srv.Capacity().SetConfig(r)
		if err := ts.Srv.Limits().SetConfig(r.Limits()); err != nil {
			t.Errorf("SetLimits: %v", err)
		}
		_ = ts.Srv.Sessions().SetConfig(r.Copies())
	}
	w, err := resources.NewWatcher(ts.Path, apply, func(err error) { t.Errorf("reload: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	apply(w.Current())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	fs, err := filestore.Open(ts.Path, filestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ao.Logger = log
	auth, err := adminhttp.NewAuth(ao)
	if err != nil {
		t.Fatal(err)
	}
	svc := admin.New(fs, admin.Options{Logger: log})
	qs := quotaapi.Handler(svc, auth, quotaapi.Options{Stats: quotaapi.EngineStats(ts.Srv.Limits().Engine(), time.Now), Logger: log})
	mux := http.NewServeMux()
	mux.Handle(adminhttp.Prefix, adminhttp.Handler(svc, auth, log))
	mux.Handle(quotaapi.Prefix, qs)
	mux.Handle(quotaapi.Prefix+"/", qs)
	mux.Handle("/", ts.Srv.Handler())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := ts.Srv.Serve(lis, mux, tlsCfg)
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = ep.Shutdown(sctx)
		cancel()
		<-done
	})
	ts.Addr = lis.Addr().String()
	ts.URL = "http://" + ts.Addr
	if tlsCfg != nil {
		ts.URL = "https://" + ts.Addr
	}
	return ts
}

// Token is a bearer token of alice, for TokenFile.
const Token = "0123456789abcdef-alice"

// TokenFile writes lines (USER TOKEN pairs) to a token file and returns
// its path.
func TokenFile(t *testing.T, lines string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
