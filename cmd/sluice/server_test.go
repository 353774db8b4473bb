package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/testutil"
)

// binary is the sluice binary built once for the tests of this package.
var binary string

func TestMain(m *testing.M) {
	testutil.QuietLogs()
	dir, err := os.MkdirTemp("", "sluice-test")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "sluice")
	out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building sluice: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const testConfig = `
resources:
  - identifier_glob: fair
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 10, learning_mode_duration: 0}
  - identifier_glob: proportional
    capacity: 90
    algorithm: {kind: PROPORTIONAL_SHARE, lease_length: 60, refresh_interval: 10, learning_mode_duration: 0}
  - identifier_glob: static
    capacity: 10
    safe_capacity: 2
    algorithm: {kind: STATIC, lease_length: 30, refresh_interval: 5}
  - identifier_glob: none
    capacity: 1
    algorithm: {kind: NO_ALGORITHM, lease_length: 60, refresh_interval: 10}
  - identifier_glob: "learn/*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 60, refresh_interval: 10}
`

// startServer runs `sluice server` as a child process on a free loopback
// port and returns its address. The process is stopped with SIGTERM at the
// end of the test.
func startServer(t *testing.T, cfg string) (addr string, cmd *exec.Cmd) {
	t.Helper()
	addr, cmd, _ = startServerWith(t, cfg)
	return addr, cmd
}

// startServerWith is startServer with more flags; it also returns the
// configuration file's path.
func startServerWith(t testing.TB, cfg string, flags ...string) (addr string, cmd *exec.Cmd, path string) {
	t.Helper()
	return testutil.StartServer(t, binary, cfg, flags...)
}

func req(resource string, wants float64) *pb.ResourceRequest {
	return &pb.ResourceRequest{ResourceId: proto.String(resource), Priority: proto.Int64(0), Wants: proto.Float64(wants)}
}

// TestServerOverGRPC drives `sluice server` with the raw grpc-go stubs of
// doorman.Capacity, as an unmodified Doorman client would.
func TestServerOverGRPC(t *testing.T) {
	addr, _ := startServer(t, testConfig)
	conn := testutil.Dial(t, addr)
	c := pb.NewCapacityClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	d, err := c.Discovery(ctx, &pb.DiscoveryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !d.GetIsMaster() || d.GetMastership().GetMasterAddress() != addr {
		t.Fatalf("Discovery = %v, want master at %s", d, addr)
	}

	get := func(client string, rs ...*pb.ResourceRequest) map[string]*pb.ResourceResponse {
		t.Helper()
		resp, err := c.GetCapacity(ctx, &pb.GetCapacityRequest{ClientId: proto.String(client), Resource: rs})
		if err != nil {
			t.Fatalf("GetCapacity(%s): %v", client, err)
		}
		if resp.Mastership != nil {
			t.Fatalf("unexpected mastership %v", resp.Mastership)
		}
		out := map[string]*pb.ResourceResponse{}
		for _, r := range resp.GetResponse() {
			out[r.GetResourceId()] = r
		}
		return out
	}

	// FAIR_SHARE, charon-paper.md §5.1 shape: first come gets what is free.
	a := get("a", req("fair", 80), req("proportional", 100), req("static", 50), req("none", 500))
	if g := a["fair"].GetGets(); g.GetCapacity() != 80 || g.GetRefreshInterval() != 10 {
		t.Errorf("fair a: %v", g)
	}
	if now := time.Now().Unix(); a["fair"].GetGets().GetExpiryTime() < now+55 || a["fair"].GetGets().GetExpiryTime() > now+61 {
		t.Errorf("fair a expiry %d, want about now+60", a["fair"].GetGets().GetExpiryTime())
	}
	if got := a["static"].GetGets().GetCapacity(); got != 10 {
		t.Errorf("static: %v, want per-client cap 10", got)
	}
	if got := a["static"].GetSafeCapacity(); got != 2 {
		t.Errorf("static safe capacity: %v, want 2", got)
	}
	if got := a["none"].GetGets().GetCapacity(); got != 500 {
		t.Errorf("none: %v, want 500", got)
	}
	if got := a["proportional"].GetGets().GetCapacity(); got != 90 {
		t.Errorf("proportional a alone: %v, want 90", got)
	}
	b := get("b", req("fair", 80), req("proportional", 50))
	if got := b["fair"].GetGets().GetCapacity(); got != 20 {
		t.Errorf("fair b: %v, want 20 (what is free)", got)
	}
	if got := b["proportional"].GetGets().GetCapacity(); got != 0 {
		t.Errorf("proportional b: %v, want 0 (all leased to a)", got)
	}
	// a asks again at once: Doorman's 5-second rule, its current lease comes
	// back undecided (the shares converge on later refreshes: the server
	// package's tests run them on a fake clock).
	a = get("a", req("fair", 10), req("proportional", 10))
	if got := a["fair"].GetGets().GetCapacity(); got != 80 {
		t.Errorf("fair a asking again at once: %v, want its current lease 80", got)
	}
	if got := a["proportional"].GetGets().GetCapacity(); got != 90 {
		t.Errorf("proportional a asking again at once: %v, want its current lease 90", got)
	}

	// Learning mode (default duration = lease length): a claimant gets its
	// claim back, a newcomer 0.
	has := &pb.Lease{ExpiryTime: proto.Int64(time.Now().Unix() + 30), RefreshInterval: proto.Int64(10), Capacity: proto.Float64(42)}
	l := get("old", &pb.ResourceRequest{ResourceId: proto.String("learn/x"), Priority: proto.Int64(0), Wants: proto.Float64(90), Has: has})
	if got := l["learn/x"].GetGets().GetCapacity(); got != 42 {
		t.Errorf("learning mode claimant: %v, want 42", got)
	}
	l = get("new", req("learn/x", 90))
	if got := l["learn/x"].GetGets().GetCapacity(); got != 0 {
		t.Errorf("learning mode newcomer: %v, want 0", got)
	}

	// A downstream server asks for its clients, in priority bands.
	sresp, err := c.GetServerCapacity(ctx, &pb.GetServerCapacityRequest{
		ServerId: proto.String("leaf-1"),
		Resource: []*pb.ServerCapacityResourceRequest{{
			ResourceId: proto.String("static"),
			Wants: []*pb.PriorityBandAggregate{
				{Priority: proto.Int64(1), NumClients: proto.Int64(3), Wants: proto.Float64(100)},
				{Priority: proto.Int64(0), NumClients: proto.Int64(2), Wants: proto.Float64(5)},
			},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sr := sresp.GetResponse()[0]
	if got := sr.GetGets().GetCapacity(); got != 50 {
		t.Errorf("server static: %v, want 5 subclients × 10", got)
	}
	if sr.GetAlgorithm().GetKind() != pb.Algorithm_STATIC || sr.GetAlgorithm().GetLeaseLength() != 30 {
		t.Errorf("server algorithm pushed down: %v", sr.GetAlgorithm())
	}

	// Release gives capacity back.
	if _, err := c.ReleaseCapacity(ctx, &pb.ReleaseCapacityRequest{ClientId: proto.String("a"), ResourceId: []string{"fair"}}); err != nil {
		t.Fatal(err)
	}
	// a's record is gone: its next request is decided afresh (its fair
	// share with b, both wanting 80), not answered early.
	a = get("a", req("fair", 80))
	if got := a["fair"].GetGets().GetCapacity(); got != 50 {
		t.Errorf("fair a after it released: %v, want 50", got)
	}

	// Bad requests: InvalidArgument naming the field.
	bad := []struct {
		name  string
		req   *pb.GetCapacityRequest
		field string
	}{
		{"empty client", &pb.GetCapacityRequest{ClientId: proto.String(""), Resource: []*pb.ResourceRequest{req("fair", 1)}}, "client_id"},
		{"empty resource", &pb.GetCapacityRequest{ClientId: proto.String("x"), Resource: []*pb.ResourceRequest{req("", 1)}}, "resource_id"},
		{"NaN wants", &pb.GetCapacityRequest{ClientId: proto.String("x"), Resource: []*pb.ResourceRequest{req("fair", math.NaN())}}, "wants"},
		{"Inf wants", &pb.GetCapacityRequest{ClientId: proto.String("x"), Resource: []*pb.ResourceRequest{req("fair", math.Inf(1))}}, "wants"},
		{"negative wants", &pb.GetCapacityRequest{ClientId: proto.String("x"), Resource: []*pb.ResourceRequest{req("fair", -1)}}, "wants"},
		{"duplicate", &pb.GetCapacityRequest{ClientId: proto.String("x"), Resource: []*pb.ResourceRequest{req("fair", 1), req("fair", 2)}}, "appears more than once"},
	}
	for _, tt := range bad {
		_, err := c.GetCapacity(ctx, tt.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: got %v, want InvalidArgument naming %s", tt.name, err, tt.field)
		}
	}
	_, err = c.GetServerCapacity(ctx, &pb.GetServerCapacityRequest{ServerId: proto.String("s"), Resource: []*pb.ServerCapacityResourceRequest{{
		ResourceId: proto.String("fair"), Wants: []*pb.PriorityBandAggregate{{Priority: proto.Int64(0), NumClients: proto.Int64(0), Wants: proto.Float64(1)}},
	}}})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "num_clients") {
		t.Errorf("num_clients 0: got %v", err)
	}
}

// TestServerOverJSON drives the same service as JSON over HTTP.
func TestServerOverJSON(t *testing.T) {
	addr, _ := startServer(t, testConfig)
	post := func(method, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post("http://"+addr+"/doorman.Capacity/"+method, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		data, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("%s: %v: %s", method, err, data)
		}
		return resp.StatusCode, out
	}
	code, out := post("Discovery", `{}`)
	if code != 200 || out["isMaster"] != true {
		t.Fatalf("Discovery: %d %v", code, out)
	}
	code, out = post("GetCapacity", `{"clientId":"j1","resource":[{"resourceId":"fair","priority":0,"wants":70}]}`)
	if code != 200 {
		t.Fatalf("GetCapacity: %d %v", code, out)
	}
	gets := out["response"].([]any)[0].(map[string]any)["gets"].(map[string]any)
	if gets["capacity"] != 70.0 || gets["refreshInterval"] != "10" {
		t.Fatalf("gets %v", gets)
	}
	_, out = post("GetCapacity", `{"clientId":"j2","resource":[{"resourceId":"fair","priority":0,"wants":70}]}`)
	if got := out["response"].([]any)[0].(map[string]any)["gets"].(map[string]any)["capacity"]; got != 30.0 {
		t.Fatalf("j2 gets %v, want 30", got)
	}
	code, out = post("ReleaseCapacity", `{"clientId":"j1","resourceId":["fair"]}`)
	if code != 200 {
		t.Fatalf("ReleaseCapacity: %d %v", code, out)
	}
	code, out = post("GetServerCapacity", `{"serverId":"leaf","resource":[{"resourceId":"fair","wants":[{"priority":0,"numClients":2,"wants":40}]}]}`)
	if code != 200 {
		t.Fatalf("GetServerCapacity: %d %v", code, out)
	}
	sr := out["response"].([]any)[0].(map[string]any)
	if sr["algorithm"].(map[string]any)["kind"] != "FAIR_SHARE" || sr["gets"].(map[string]any)["capacity"] != 40.0 {
		t.Fatalf("server response %v", sr)
	}
	// Bad input is a clear 400 with the field named, not a crash.
	code, out = post("GetCapacity", `{"clientId":"","resource":[{"resourceId":"fair","priority":0,"wants":1}]}`)
	if code != 400 || out["code"] != "invalid_argument" || !strings.Contains(fmt.Sprint(out["message"]), "client_id") {
		t.Fatalf("empty client id: %d %v", code, out)
	}
	code, out = post("GetCapacity", `{"clientId":"x","resource":[{"resourceId":"fair","priority":0,"wants":-3}]}`)
	if code != 400 || !strings.Contains(fmt.Sprint(out["message"]), "wants") {
		t.Fatalf("negative wants: %d %v", code, out)
	}
	// A missing required field (proto2) is rejected by the codec.
	code, out = post("GetCapacity", `{"clientId":"x","resource":[{"resourceId":"fair","priority":0}]}`)
	if code != 400 {
		t.Fatalf("missing wants: %d %v", code, out)
	}
	code, _ = post("GetCapacity", `{not json`)
	if code != 400 {
		t.Fatalf("malformed JSON: %d", code)
	}
	var buf bytes.Buffer
	buf.WriteString(`{"clientId":"x","resource":[`)
	for i := 0; i < 10_001; i++ {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"resourceId":"r%d","priority":0,"wants":1}`, i)
	}
	buf.WriteString(`]}`)
	code, out = post("GetCapacity", buf.String())
	if code != 400 || !strings.Contains(fmt.Sprint(out["message"]), "at most") {
		t.Fatalf("oversize request: %d %v", code, out)
	}
}

// TestServerSIGTERM checks that SIGTERM stops the server cleanly.
func TestServerSIGTERM(t *testing.T) {
	addr, cmd := startServer(t, testConfig)
	resp, err := http.Post("http://"+addr+"/doorman.Capacity/Discovery", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("server exited with %v after SIGTERM", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("server did not stop within 15 s of SIGTERM")
	}
	if _, err := http.Post("http://"+addr+"/doorman.Capacity/Discovery", "application/json", strings.NewReader("{}")); err == nil {
		t.Fatal("server still answering after SIGTERM")
	}
}
