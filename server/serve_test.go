package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	prom "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/api/doorman/doormanconnect"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/tlsutil"
)

// startEndpoint serves s with handler on a kernel-picked loopback port
// until the test ends.
func startEndpoint(t *testing.T, s *Server, handler http.Handler, cfg *tls.Config) (string, *Endpoint) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := s.Serve(lis, handler, cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = ep.Shutdown(ctx)
	})
	return lis.Addr().String(), ep
}

// endpointServer is a standalone server with fixture.Doorman, not running:
// the endpoint tests serve it themselves.
func endpointServer(t *testing.T) *Server {
	t.Helper()
	return assemble(t, Config{ID: "test", Repository: Repository{Fixed: doormanRepo(t)}})
}

// gRPC goes to grpc-go's server, not to the HTTP handler: with a handler
// that answers 404 to everything, gRPC still works and JSON does not.
// Both sides count in the same metrics.
func TestEndpointGRPCOnItsOwnTransport(t *testing.T) {
	s := endpointServer(t)
	addr, _ := startEndpoint(t, s, http.NotFoundHandler(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := testutil.Dial(t, addr)
	resp, err := pb.NewCapacityClient(conn).GetCapacity(ctx, capacityRequest("g", "fixed/a", 5))
	if err != nil || resp.GetResponse()[0].GetGets().GetCapacity() != 5 {
		t.Fatalf("gRPC through grpc-go: %v, %v", resp, err)
	}
	// A bad request: InvalidArgument on the wire, counted as such.
	if _, err := pb.NewCapacityClient(conn).GetCapacity(ctx, &pb.GetCapacityRequest{ClientId: proto.String("")}); err == nil || !strings.Contains(err.Error(), "InvalidArgument") {
		t.Fatalf("empty client id over grpc-go: %v, want InvalidArgument", err)
	}
	if got := prom.ToFloat64(s.rpc.requests.WithLabelValues("/doorman.Capacity/GetCapacity", "ok")); got != 1 {
		t.Errorf("requests{ok} = %v, want 1", got)
	}
	if got := prom.ToFloat64(s.rpc.requests.WithLabelValues("/doorman.Capacity/GetCapacity", "invalid_argument")); got != 1 {
		t.Errorf("requests{invalid_argument} = %v, want 1", got)
	}
	r, err := http.Post("http://"+addr+"/doorman.Capacity/GetCapacity", "application/json", strings.NewReader(`{"clientId":"j"}`))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusNotFound {
		t.Fatalf("JSON went to %d, want the HTTP handler's 404", r.StatusCode)
	}
}

// Every protocol on one port: gRPC (grpc-go and Connect's client), gRPC-Web
// and JSON over HTTP/1.1, status pages; in plaintext and over mTLS.
func TestEndpointAllProtocols(t *testing.T) {
	certs := testutil.MakeCerts(t)
	serverTLS, err := tlsutil.Server(certs.ServerCert, certs.ServerKey, certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := tlsutil.Client(certs.CA, certs.ClientCert, certs.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		server *tls.Config
		client *tls.Config
	}{{"plaintext", nil, nil}, {"mTLS", serverTLS, clientTLS}} {
		t.Run(tc.name, func(t *testing.T) {
			// As `sluice server --tls-*` serves: New and Run with
			// Config.TLS.
			s, _ := startServer(t, Config{ID: "test", Repository: Repository{Fixed: doormanRepo(t)}, Listen: Listen{TLS: TLS{Config: tc.server}}})
			addr := s.Addr()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			scheme, creds := "http", insecure.NewCredentials()
			// A transport (so a connection) per client: the endpoint
			// chooses grpc-go or net/http once per connection.
			h2 := func() *http.Transport {
				tr := &http.Transport{TLSClientConfig: tc.client}
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetUnencryptedHTTP2(true)
				tr.Protocols.SetHTTP2(true)
				return tr
			}
			h1 := &http.Transport{TLSClientConfig: tc.client}
			if tc.client != nil {
				scheme, creds = "https", credentials.NewTLS(tc.client)
			}
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := pb.NewCapacityClient(conn).GetCapacity(ctx, capacityRequest("grpc-go", "fixed/a", 5)); err != nil {
				t.Errorf("grpc-go client: %v", err)
			}
			for name, c := range map[string]doormanconnect.CapacityClient{
				"connect gRPC":            doormanconnect.NewCapacityClient(&http.Client{Transport: h2()}, scheme+"://"+addr, connect.WithGRPC()),
				"connect gRPC-Web HTTP/1": doormanconnect.NewCapacityClient(&http.Client{Transport: h1}, scheme+"://"+addr, connect.WithGRPCWeb()),
				"connect gRPC-Web HTTP/2": doormanconnect.NewCapacityClient(&http.Client{Transport: h2()}, scheme+"://"+addr, connect.WithGRPCWeb()),
				"JSON HTTP/1.1":           doormanconnect.NewCapacityClient(&http.Client{Transport: h1}, scheme+"://"+addr, connect.WithProtoJSON()),
				"JSON HTTP/2":             doormanconnect.NewCapacityClient(&http.Client{Transport: h2()}, scheme+"://"+addr, connect.WithProtoJSON()),
			} {
				if _, err := c.GetCapacity(ctx, connect.NewRequest(capacityRequest(name, "fixed/a", 5))); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
			for name, tr := range map[string]*http.Transport{"HTTP/1.1": h1, "HTTP/2": h2()} {
				r, err := (&http.Client{Transport: tr}).Get(scheme + "://" + addr + "/healthz")
				if err != nil {
					t.Fatalf("/healthz over %s: %v", name, err)
				}
				var body bytes.Buffer
				_, _ = body.ReadFrom(r.Body)
				r.Body.Close()
				if r.StatusCode != 200 || body.String() != "ok\n" || r.ProtoMajor != map[string]int{"HTTP/1.1": 1, "HTTP/2": 2}[name] {
					t.Errorf("/healthz over %s: %d %q (%s)", name, r.StatusCode, body.String(), r.Proto)
				}
			}
			if st, _ := s.Capacity().Status("fixed/a"); len(st.Leases) != 6 {
				t.Errorf("%d leases, want one per client (6)", len(st.Leases))
			}
		})
	}
	// Without a client certificate the mTLS endpoint refuses.
	s, _ := startServer(t, Config{ID: "test", Repository: Repository{Fixed: doormanRepo(t)}, Listen: Listen{TLS: TLS{Config: serverTLS}}})
	addr := s.Addr()
	noCert, err := tlsutil.Client(certs.CA, "", "")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(noCert)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pb.NewCapacityClient(conn).GetCapacity(ctx, capacityRequest("anon", "fixed/a", 5)); err == nil {
		t.Error("a client without a certificate was served over mTLS")
	}
}

// Shutdown lets an RPC in flight finish and refuses new connections.
func TestEndpointShutdown(t *testing.T) {
	s := endpointServer(t)
	addr, ep := startEndpoint(t, s, s.Handler(), nil)
	conn := testutil.Dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pb.NewCapacityClient(conn).GetCapacity(ctx, capacityRequest("a", "fixed/a", 5)); err != nil {
		t.Fatal(err)
	}
	if err := ep.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatal("the endpoint still accepts connections after Shutdown")
	}
}

// ackFilterConn drops exactly the first empty SETTINGS ACK after an HTTP/2
// preface, whatever the read sizes, and passes everything else (and any
// HTTP/1 stream) unchanged.
func TestAckFilterConn(t *testing.T) {
	frame := func(typ, flags byte, payload ...byte) []byte {
		n := len(payload)
		return append([]byte{byte(n >> 16), byte(n >> 8), byte(n), typ, flags, 0, 0, 0, 0}, payload...)
	}
	settings := frame(0x4, 0, 0, 3, 0, 0, 0, 100) // MAX_CONCURRENT_STREAMS 100
	ack := frame(0x4, 0x1)
	window := frame(0x8, 0, 0, 0, 1, 0)
	headers := frame(0x1, 0x5, 0x82, 0x86, 0x84) // a HEADERS frame whose payload holds 0x04 0x01 look-alikes
	var in, want []byte
	in = append(in, http2Preface...)
	in = append(in, settings...)
	in = append(in, window...)
	in = append(in, ack...) // the matcher's: dropped
	in = append(in, headers...)
	in = append(in, ack...) // net/http's: kept
	want = append(want, http2Preface...)
	want = append(want, settings...)
	want = append(want, window...)
	want = append(want, headers...)
	want = append(want, ack...)
	h1 := []byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	for _, tc := range []struct {
		name     string
		in, want []byte
	}{{"HTTP/2", in, want}, {"HTTP/1.1", h1, h1}} {
		for _, chunk := range []int{1, 3, 9, 1000} {
			client, srv := net.Pipe()
			go func() {
				for b := tc.in; len(b) > 0; {
					n := min(chunk, len(b))
					_, _ = client.Write(b[:n])
					b = b[n:]
				}
				client.Close()
			}()
			var got bytes.Buffer
			_, _ = got.ReadFrom(&ackFilterConn{Conn: srv})
			if !bytes.Equal(got.Bytes(), tc.want) {
				t.Errorf("%s in chunks of %d: got %x, want %x", tc.name, chunk, got.Bytes(), tc.want)
			}
		}
	}
}
