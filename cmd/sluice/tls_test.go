package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/tlsutil"
)

// A root and an intermediate that both require client certificates (mTLS),
// the intermediate speaking TLS to the root, and a client of the
// intermediate: leases flow; clients without a certificate, with one from
// another CA, or in plaintext are refused.
func TestMutualTLS(t *testing.T) {
	certs := testutil.MakeCerts(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(`
resources:
  - identifier_glob: "res"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 1, learning_mode_duration: 0}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	serve := []string{"--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--tls-client-ca", certs.CA}
	root := startProc(t, "root", append([]string{"server", "--config", cfg}, serve...)...)
	mid := startProc(t, "mid", append([]string{"server", "--parent", root.addr,
		"--parent-tls-ca", certs.CA, "--parent-tls-cert", certs.ClientCert, "--parent-tls-key", certs.ClientKey}, serve...)...)

	good, err := tlsutil.Client(certs.CA, certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	leaseOverTLS(t, mid.addr, good, "c1", "a lease over mTLS through the intermediate")

	ask := func(cfg *tls.Config, scheme string) error {
		tr := &http.Transport{TLSClientConfig: cfg}
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetHTTP2(true)
		tr.Protocols.SetUnencryptedHTTP2(true)
		stub := doormanconnect.NewCapacityClient(&http.Client{Transport: tr}, scheme+"://"+root.addr, connect.WithGRPC())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := stub.Discovery(ctx, connect.NewRequest(&pb.DiscoveryRequest{}))
		return err
	}
	if err := ask(good, "https"); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	noCert, _ := tlsutil.Client(certs.CA, "", "")
	if err := ask(noCert, "https"); err == nil {
		t.Error("a client without a certificate was served")
	}
	other, _ := tlsutil.Client(certs.CA, certs.OtherClientCert, certs.OtherKey)
	if err := ask(other, "https"); err == nil {
		t.Error("a client with a certificate from another CA was served")
	}
	wrongCA, _ := tlsutil.Client(certs.OtherCA, certs.ClientCert, certs.ClientKey)
	if err := ask(wrongCA, "https"); err == nil {
		t.Error("the client trusted a server certificate from a CA it does not know")
	}
	if err := ask(nil, "http"); err == nil {
		t.Error("a plaintext client was served by a TLS server")
	}
}

func TestStatusCommand(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(`
resources:
  - identifier_glob: "res/*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 5, learning_mode_duration: 0}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := startProc(t, "srv", "server", "--config", cfg, "--id", "status-test")
	c, err := client.New(srv.addr, client.WithID("c1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, _ := c.Resource("res/a", 40)
	testutil.Eventually(t, 30*time.Second, "a lease", func() bool { return res.Capacity() == 40 })
	out, err := exec.Command(binary, "status", "--server", srv.addr).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("sluice status:\n%s", out)
	for _, want := range []string{"status-test", "master (standalone)", "res/a", "FAIR_SHARE", "40"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	out, err = exec.Command(binary, "status", "--server", srv.addr, "--json", "--prefix", "nothing").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"resources": []`) {
		t.Fatalf("--json --prefix nothing: %v %s", err, out)
	}
	if out, err := exec.Command(binary, "status", "--server", "127.0.0.1:1").CombinedOutput(); err == nil {
		t.Fatalf("an unreachable server: %s", out)
	}
}

// The election over etcd with mTLS: a server that presents its client
// certificate becomes master; one without cannot reach etcd.
func TestEtcdOverTLS(t *testing.T) {
	certs := testutil.MakeCerts(t)
	etcd := etcdtest.StartEtcdTLS(t, certs)
	p := startProc(t, "tls-etcd", "server", "--election", "etcd", "--etcd-endpoints", etcd.Endpoint,
		"--election-key", "/sluice/test/tls", "--etcd-tls-ca", certs.CA, "--etcd-tls-cert", certs.ClientCert, "--etcd-tls-key", certs.ClientKey)
	testutil.Eventually(t, 30*time.Second, "master through etcd over mTLS", func() bool { _, is, _ := discover(p.addr); return is })
	q := startProc(t, "no-cert", "server", "--election", "etcd", "--etcd-endpoints", etcd.Endpoint,
		"--election-key", "/sluice/test/tls-other", "--etcd-tls-ca", certs.CA)
	time.Sleep(2 * time.Second) // give it a chance to (wrongly) win; not a timing assertion
	if _, is, _ := discover(q.addr); is {
		t.Fatal("a server without a client certificate won an election on an mTLS etcd")
	}
}

// Flags from SLUICE_<FLAG>, a command-line flag winning over the
// environment; --pprof; health and readiness over HTTP.
func TestServerEnvironmentAndPprof(t *testing.T) {
	cmd := exec.Command(binary, "server", "--listen", "127.0.0.1:0", "--log-level", testutil.ChildLogLevel())
	cmd.Env = append(os.Environ(), "SLUICE_ID=from-env", "SLUICE_PPROF=true", "SLUICE_LOG_FORMAT=json", "SLUICE_LISTEN=127.0.0.1:1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	buf := make([]byte, 256)
	n, err := out.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(buf[:n]), "\n", 2)[0], "listening on "))
	if addr == "127.0.0.1:1" {
		t.Fatal("SLUICE_LISTEN overrode --listen")
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/debug/status?format=json"); code != 200 || !strings.Contains(body, `"id": "from-env"`) {
		t.Fatalf("SLUICE_ID not applied: %d %s", code, body)
	}
	if code, _ := get("/debug/pprof/"); code != 200 {
		t.Fatalf("SLUICE_PPROF=true: /debug/pprof/ answered %d", code)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("readyz %d", code)
	}
	// Without --pprof the profiler is not served.
	plain := startProc(t, "plain", "server")
	if resp, err := http.Get("http://" + plain.addr + "/debug/pprof/"); err != nil || resp.StatusCode == 200 {
		t.Fatalf("pprof served without --pprof: %v", err)
	}
	// A bad value in the environment is a clear error.
	bad := exec.Command(binary, "server", "--listen", "127.0.0.1:0")
	bad.Env = append(os.Environ(), "SLUICE_GRACE=soon")
	if out, err := bad.CombinedOutput(); err == nil || !strings.Contains(string(out), "SLUICE_GRACE") {
		t.Fatalf("bad SLUICE_GRACE: %v %s", err, out)
	}
}

// leaseOverTLS has a Go client with id, over cfg, lease 30 of resource
// "res" at addr, and fails the test unless it holds them (what names the
// wait) within 30 s.
func leaseOverTLS(t *testing.T, addr string, cfg *tls.Config, id, what string) {
	t.Helper()
	c, err := client.New(addr, client.WithTLS(cfg), client.WithID(id))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Resource("res", 30)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, what, func() bool { return res.Capacity() == 30 })
}
