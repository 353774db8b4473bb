package discovery_test

import (
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/server"
	"github.com/sluice-rl/sluice/server/capacity"
)

func serve(t *testing.T) (*capacity.Service, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(context.Background(), server.Config{Listen: server.Listen{Advertise: lis.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: srv.Handler(), Protocols: p}
	go func() { _ = hs.Serve(lis) }()
	t.Cleanup(func() { hs.Close() })
	return srv.Capacity(), lis.Addr().String()
}

func h2c() *http.Client {
	tr := &http.Transport{}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}

func TestNextFindsTheMaster(t *testing.T) {
	_, master := serve(t)
	standby, standbyAddr := serve(t)
	standby.SetMastership(false, master)
	dead := "127.0.0.1:1" // nothing listens on port 1
	hc := h2c()
	if got := discovery.Next(context.Background(), discovery.HTTPDialer(hc, false), []string{dead, standbyAddr, master}, dead); got != master {
		t.Fatalf("Next after the dead address = %s, want the master %s", got, master)
	}
	if got, err := discovery.Ask(context.Background(), discovery.HTTPDialer(hc, false), master); err != nil || got != master {
		t.Fatalf("Ask(master) = %q, %v", got, err)
	}
	// Nobody knows a master: move on to the next address.
	standby.SetMastership(false, "")
	if got := discovery.Next(context.Background(), discovery.HTTPDialer(hc, false), []string{dead, standbyAddr}, dead); got != standbyAddr {
		t.Fatalf("Next with no master known = %s, want %s", got, standbyAddr)
	}
}
