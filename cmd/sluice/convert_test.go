package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	qs "github.com/sluice-rl/sluice/api/quotaservice"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server/envoyrls"
	"github.com/sluice-rl/sluice/server/limitsvc"
)

var (
	qsTestdata    = filepath.Join("..", "..", "limits", "limitsyaml", "testdata", "quotaservice.yaml")
	envoyTestdata = filepath.Join("..", "..", "limits", "limitsyaml", "testdata", "envoy")
)

// convertWithCLI runs `sluice config convert --from from path` and returns
// the configuration it prints, parsed as the server would.
func convertWithCLI(t *testing.T, from, path string) *resources.Repository {
	t.Helper()
	out, err := exec.Command(binary, "config", "convert", "--from", from, path).Output()
	if err != nil {
		t.Fatalf("sluice config convert --from %s %s: %v", from, path, err)
	}
	r, err := resources.Parse(out)
	if err != nil {
		t.Fatalf("the conversion does not load: %v\n%s", err, out)
	}
	return r
}

// docs/migrate/quotaservice.md: Square's quota service file and its conversion,
// each served by a limits service on real gRPC with one fake clock, answer
// every request of a sequence identically — named buckets, default
// buckets, dynamic buckets up to max_dynamic_buckets, the global default,
// too many tokens, unknown namespaces, buckets drained and refilled over
// virtual time, waits.
func TestConvertQuotaServiceSameAnswers(t *testing.T) {
	// The shared example (a global default: every namespace has a
	// bucket), and one without a global default, with a namespace of named
	// buckets only and few dynamic buckets.
	other := filepath.Join(t.TempDir(), "quotaservice.yaml")
	if err := os.WriteFile(other, []byte(`namespaces:
  Pinky_TheBrain: # named buckets only
    buckets:
      UserService: {size: 3, fill_rate: 2, wait_timeout_millis: 300, max_debt_millis: 700}
      users: {size: 50, fill_rate: 9, max_tokens_per_request: 60}
  TheBrain_userLogins:
    max_dynamic_buckets: 3
    dynamic_bucket_template: {size: 20, fill_rate: 5, max_idle_millis: 2000}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	statuses := map[qs.AllowResponse_Status]int{}
	var mu sync.Mutex
	// Each file on servers and a clock of its own: the two side by side.
	t.Run("files", func(t *testing.T) {
		for _, tc := range []struct{ name, path string }{{"shared example", qsTestdata}, {"no global default", other}} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				got := map[qs.AllowResponse_Status]int{}
				sameQuotaAnswers(t, tc.path, got)
				mu.Lock()
				defer mu.Unlock()
				for st, n := range got {
					statuses[st] += n
				}
			})
		}
	})
	// The sequence exercises the buckets: grants, waits run out, missing
	// buckets, too many tokens, too many dynamic buckets.
	for _, st := range []qs.AllowResponse_Status{qs.AllowResponse_OK, qs.AllowResponse_REJECTED_TIMEOUT, qs.AllowResponse_REJECTED_NO_BUCKET,
		qs.AllowResponse_REJECTED_TOO_MANY_TOKENS_REQUESTED, qs.AllowResponse_REJECTED_TOO_MANY_BUCKETS} {
		if statuses[st] == 0 {
			t.Errorf("no answer %v in the sequence: %v", st, statuses)
		}
	}
}

// sameQuotaAnswers compares the answers of the quota service's file path
// and its conversion over the sequence, counting them in statuses.
func sameQuotaAnswers(t *testing.T, path string, statuses map[qs.AllowResponse_Status]int) {
	orig, err := resources.LoadQuotaService(path)
	if err != nil {
		t.Fatal(err)
	}
	conv := convertWithCLI(t, "quotaservice", path)
	clock := testutil.NewClock(time.Unix(1_800_000_000, 0))
	serve := func(cfg *limits.Config) qs.QuotaServiceClient {
		svc, err := limitsvc.New(limitsvc.Options{Now: clock.Now, Config: cfg, Logger: testutil.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		return qs.NewQuotaServiceClient(testutil.ServeGRPC(t, func(gs *grpc.Server) { qs.RegisterQuotaServiceServer(gs, svc.QuotaService()) }))
	}
	a, b := serve(orig.Limits()), serve(conv.Limits())
	type req struct {
		ns, bucket string
		tokens     int64
		noWait     bool
	}
	var reqs []req
	for _, ns := range []string{"Pinky_TheBrain", "Pinky_PinkyMySQL", "TheBrain_userLogins", "nobody"} {
		for _, bucket := range []string{"UserService", "UserService_getUser", "users", "users_insert", "someone", "someone-else", "a-third", "a-fourth", ""} {
			for _, tokens := range []int64{1, 7, 55, 600} {
				reqs = append(reqs, req{ns, bucket, tokens, tokens == 7})
			}
		}
	}
	compared := 0
	for round := range 40 {
		for _, r := range reqs {
			in := &qs.AllowRequest{Namespace: r.ns, BucketName: r.bucket, TokensRequested: r.tokens}
			if r.noWait {
				in.MaxWaitTimeOverride, in.MaxWaitMillisOverride = true, 0
			}
			ra, errA := a.Allow(t.Context(), in)
			rb, errB := b.Allow(t.Context(), in)
			if fmt.Sprint(errA) != fmt.Sprint(errB) || !proto.Equal(ra, rb) {
				t.Fatalf("%s, round %d, %+v: the quota service's file answers %v (%v), its conversion %v (%v)", path, round, r, ra, errA, rb, errB)
			}
			compared++
			statuses[ra.GetStatus()]++
		}
		clock.Advance(137 * time.Millisecond)
	}
	t.Logf("%s: %d requests, every answer equal", path, compared)
}

// The acceptance test of `sluice config convert --from envoy-ratelimit`
// (docs/envoy.md, "In Sluice's own configuration"): envoyproxy/ratelimit's
// directory and its conversion, each served by Envoy's rate limit service
// on real gRPC with one fake clock, answer every request of a sequence
// identically (every domain's rules: keys with and without values,
// wildcards, nested rules, replaces, shadow mode, unlimited, the block
// list, hits_addend).
func TestConvertEnvoyRateLimitSameAnswers(t *testing.T) {
	orig, err := limitsyaml.LoadEnvoyRateLimit(envoyTestdata)
	if err != nil {
		t.Fatal(err)
	}
	conv := convertWithCLI(t, "envoy-ratelimit", envoyTestdata)
	clock := testutil.NewClock(time.Unix(1_800_000_000, 0))
	serve := func(cfg *rls.Config) rlsv3.RateLimitServiceClient {
		svc, err := envoyrls.New(envoyrls.Options{Now: clock.Now, Store: rls.NewMemoryStore(), Logger: testutil.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		svc.SetConfig(cfg)
		return rlsv3.NewRateLimitServiceClient(testutil.ServeGRPC(t, func(gs *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(gs, svc) }))
	}
	a, b := serve(orig), serve(conv.EnvoyRateLimit())
	if got, want := strings.Join(conv.EnvoyRateLimit().Names(), ","), strings.Join(orig.Names(), ","); got != want {
		t.Fatalf("converted domains %s, want %s", got, want)
	}
	d := func(kv ...string) *ratelimitv3.RateLimitDescriptor {
		out := &ratelimitv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Entries = append(out.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	descriptors := []*ratelimitv3.RateLimitDescriptor{
		d("database", "users"), d("database", "default"), d("database", "other"),
		d("remote_address", "10.0.0.1"), d("remote_address", "50.0.0.5"), d("key", "value", "subkey", "subvalue"),
		d("destination_cluster", "mock"), d("path", "/foo/bar"), d("path", "/api/v1/checkout"), d("path", "/api/v2/checkout"),
		d("category", "account"), d("user", "alice"), d("category", "account", "user", "bob"), d("internal", "x"), d("health", "ok"),
		d("message_type", "marketing", "to_number", "555"), d("to_number", "555"), d("to_number", "556"),
	}
	compared, codes := 0, map[rlsv3.RateLimitResponse_Code]int{}
	for round := range 30 {
		for _, domain := range orig.Names() {
			for i, desc := range descriptors {
				in := &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc}, HitsAddend: uint32(i % 3)}
				if i%4 == 0 { // two descriptors decided together
					in.Descriptors = append(in.Descriptors, descriptors[(i+round)%len(descriptors)])
				}
				ra, errA := a.ShouldRateLimit(t.Context(), in)
				rb, errB := b.ShouldRateLimit(t.Context(), in)
				if fmt.Sprint(errA) != fmt.Sprint(errB) || !proto.Equal(ra, rb) {
					t.Fatalf("round %d, domain %s, %v: envoyproxy/ratelimit's files answer %v (%v), their conversion %v (%v)", round, domain, in.Descriptors, ra, errA, rb, errB)
				}
				compared++
				codes[ra.GetOverallCode()]++
			}
		}
		clock.Advance(2300 * time.Millisecond)
	}
	t.Logf("%d requests, every answer equal: %v", compared, codes)
	if codes[rlsv3.RateLimitResponse_OK] == 0 || codes[rlsv3.RateLimitResponse_OVER_LIMIT] == 0 {
		t.Errorf("the sequence should see both OK and OVER_LIMIT: %v", codes)
	}
}
