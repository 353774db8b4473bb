package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/tlsutil"
)

// A Doorman tree with client identities, as `sluice server
// --client-identity cert --client-policy FILE` runs it: the root's policy
// lets the intermediate (its certificate's CN "regional", its --id
// regional/mid-1) lease everything and alice nothing; the intermediate
// binds its own clients to their certificates. Alice's client, id
// alice/c1, gets its lease through the intermediate; claiming bob's id
// there, or leasing at the root directly, is PermissionDenied; an
// intermediate whose --id is not its certificate's is refused by the
// root.
func TestClientIdentityTree(t *testing.T) {
	certs := testutil.MakeCerts(t)
	dir := t.TempDir()
	cfg, policy := filepath.Join(dir, "config.yaml"), filepath.Join(dir, "policy.yaml")
	for file, content := range map[string]string{cfg: `
resources:
  - identifier_glob: "res"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 20, refresh_interval: 1, learning_mode_duration: 0}
`, policy: `
identities:
  regional:
    lease: ["**"]
`} {
		if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	regionalCert, regionalKey := certs.Client(t, "regional")
	aliceCert, aliceKey := certs.Client(t, "alice")
	serve := []string{"--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--tls-client-ca", certs.CA, "--client-identity", "cert"}
	root := startProc(t, "root", append([]string{"server", "--config", cfg, "--client-policy", policy}, serve...)...)
	intermediate := func(name, id string) *proc {
		return startProc(t, name, append([]string{"server", "--parent", root.addr, "--id", id,
			"--parent-tls-ca", certs.CA, "--parent-tls-cert", regionalCert, "--parent-tls-key", regionalKey}, serve...)...)
	}
	mid := intermediate("mid", "regional/mid-1")

	alice, err := tlsutil.Client(certs.CA, aliceCert, aliceKey)
	if err != nil {
		t.Fatal(err)
	}
	leaseOverTLS(t, mid.addr, alice, "alice/c1", "alice's lease through the intermediate")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ask := func(addr, id string) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(alice)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = pb.NewCapacityClient(conn).GetCapacity(ctx, &pb.GetCapacityRequest{ClientId: proto.String(id),
			Resource: []*pb.ResourceRequest{{ResourceId: proto.String("res"), Priority: proto.Int64(0), Wants: proto.Float64(10)}}})
		return err
	}
	if err := ask(mid.addr, "bob"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `identity "alice"`) {
		t.Errorf("alice as bob at the intermediate: %v, want PermissionDenied naming alice", err)
	}
	if err := ask(root.addr, "alice"); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "--client-policy") {
		t.Errorf("alice at the root, which her policy does not let her lease from: %v, want PermissionDenied naming --client-policy", err)
	}

	// An intermediate that says it is someone its certificate does not
	// name: the root refuses its GetServerCapacity.
	misnamed := intermediate("misnamed", "mid-2")
	c2, err := client.New(misnamed.addr, client.WithTLS(alice), client.WithID("alice/c2"))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Resource("res", 30); err != nil {
		t.Fatal(err)
	}
	metrics := &http.Client{Transport: &http.Transport{TLSClientConfig: alice}}
	testutil.Eventually(t, 30*time.Second, "the root refusing the misnamed intermediate", func() bool {
		r, err := metrics.Get("https://" + root.addr + "/metrics")
		if err != nil {
			return false
		}
		defer r.Body.Close()
		body, _ := io.ReadAll(r.Body)
		return strings.Contains(string(body), `sluice_server_requests_total{code="permission_denied",method="/doorman.Capacity/GetServerCapacity"}`)
	})
}
