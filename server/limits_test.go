package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	qs "github.com/sluice-rl/sluice/api/quotaservice"
	v1 "github.com/sluice-rl/sluice/api/sluice/v1"
	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/fixture"
	"github.com/sluice-rl/sluice/limits"
	"github.com/sluice-rl/sluice/limits/limitsyaml"
	"github.com/sluice-rl/sluice/resources"
)

// limitsServer runs a server with fixture.QuotaService's limits at a fake clock, and
// returns it, a grpc-go connection to it and its address.
func limitsServer(t *testing.T) (*Server, *testutil.Clock, *grpc.ClientConn, string) {
	t.Helper()
	cfg, err := limitsyaml.ParseQuotaService([]byte(fixture.QuotaService))
	if err != nil {
		t.Fatal(err)
	}
	clock := testutil.NewClock(time.Unix(1_700_000_000, 0))
	s, _ := startServer(t, Config{ID: "limits", Runtime: Runtime{Now: clock.Now}, Repository: Repository{Fixed: resources.Compose(nil, cfg, nil, nil)}})
	return s, clock, testutil.Dial(t, s.Addr()), s.Addr()
}

// A client generated from Square's protos (the project's own copy, field
// for field) gets every status over real gRPC, each as a normal response.
func TestQuotaServiceAllowEveryStatus(t *testing.T) {
	_, clock, conn, _ := limitsServer(t)
	c := qs.NewQuotaServiceClient(conn)
	ctx := t.Context()
	allow := func(req *qs.AllowRequest) *qs.AllowResponse {
		t.Helper()
		resp, err := c.Allow(ctx, req)
		if err != nil {
			t.Fatalf("Allow(%v): RPC error %v; the quota service answers every request with a status", req, err)
		}
		return resp
	}
	cases := []struct {
		name    string
		req     *qs.AllowRequest
		status  qs.AllowResponse_Status
		granted int64
		wait    int64
	}{
		{"named bucket, tokens now", &qs.AllowRequest{Namespace: "api", BucketName: "small", TokensRequested: 5}, qs.AllowResponse_OK, 5, 0},
		{"0 tokens means 1", &qs.AllowRequest{Namespace: "api", BucketName: "small"}, qs.AllowResponse_OK, 1, 0},
		{"the rest of the bucket", &qs.AllowRequest{Namespace: "api", BucketName: "small", TokensRequested: 4}, qs.AllowResponse_OK, 4, 0},
		// Empty now: 5 tokens at 10/s is a 500 ms wait, within the
		// bucket's 1000 ms.
		{"future tokens, with their wait", &qs.AllowRequest{Namespace: "api", BucketName: "small", TokensRequested: 5}, qs.AllowResponse_OK, 5, 500},
		// Another 5 would wait 1000 ms: beyond a 100 ms override.
		{"override lowers the wait", &qs.AllowRequest{Namespace: "api", BucketName: "small", TokensRequested: 5, MaxWaitTimeOverride: true, MaxWaitMillisOverride: 100}, qs.AllowResponse_REJECTED_TIMEOUT, 0, 0},
		// An override above the bucket's own maximum is held to it.
		{"override cannot raise it", &qs.AllowRequest{Namespace: "api", BucketName: "small", TokensRequested: 5, MaxWaitTimeOverride: true, MaxWaitMillisOverride: 60_000}, qs.AllowResponse_OK, 5, 1000},
		{"and then it is full of debt", &qs.AllowRequest{Namespace: "api", BucketName: "small", TokensRequested: 1}, qs.AllowResponse_REJECTED_TIMEOUT, 0, 0},
		{"too many tokens", &qs.AllowRequest{Namespace: "api", BucketName: "small", TokensRequested: 6}, qs.AllowResponse_REJECTED_TOO_MANY_TOKENS_REQUESTED, 0, 0},
		{"dynamic bucket 1", &qs.AllowRequest{Namespace: "logins", BucketName: "ann"}, qs.AllowResponse_OK, 1, 0},
		{"dynamic bucket 2", &qs.AllowRequest{Namespace: "logins", BucketName: "bob"}, qs.AllowResponse_OK, 1, 0},
		{"too many buckets", &qs.AllowRequest{Namespace: "logins", BucketName: "cat"}, qs.AllowResponse_REJECTED_TOO_MANY_BUCKETS, 0, 0},
		{"unknown namespace: the global default", &qs.AllowRequest{Namespace: "elsewhere", BucketName: "x", TokensRequested: 5}, qs.AllowResponse_OK, 5, 0},
		{"invalid name", &qs.AllowRequest{Namespace: "api", BucketName: "no spaces"}, qs.AllowResponse_REJECTED_INVALID_REQUEST, 0, 0},
		{"negative tokens", &qs.AllowRequest{Namespace: "api", BucketName: "small", TokensRequested: -1}, qs.AllowResponse_REJECTED_INVALID_REQUEST, 0, 0},
		{"negative wait override", &qs.AllowRequest{Namespace: "api", BucketName: "small", MaxWaitTimeOverride: true, MaxWaitMillisOverride: -5}, qs.AllowResponse_REJECTED_INVALID_REQUEST, 0, 0},
	}
	for _, tc := range cases {
		resp := allow(tc.req)
		if resp.GetStatus() != tc.status || resp.GetTokensGranted() != tc.granted || resp.GetWaitMillis() != tc.wait {
			t.Errorf("%s: %v granted %d wait %d ms, want %v granted %d wait %d ms", tc.name,
				resp.GetStatus(), resp.GetTokensGranted(), resp.GetWaitMillis(), tc.status, tc.granted, tc.wait)
		}
	}
	// The global default is one shared bucket, and a refill follows time.
	if got := allow(&qs.AllowRequest{Namespace: "other", BucketName: "y", TokensRequested: 1, MaxWaitTimeOverride: true}); got.GetStatus() != qs.AllowResponse_REJECTED_TIMEOUT {
		t.Errorf("the global default after 5 of 5 tokens: %v, want REJECTED_TIMEOUT", got.GetStatus())
	}
	clock.Advance(time.Second)
	if got := allow(&qs.AllowRequest{Namespace: "other", BucketName: "y", TokensRequested: 1, MaxWaitTimeOverride: true}); got.GetStatus() != qs.AllowResponse_OK {
		t.Errorf("the global default a second later: %v, want OK", got.GetStatus())
	}
}

// sluice.v1.Limits over gRPC: partial grants, durations, retry-after,
// which bucket answered; invalid requests are InvalidArgument naming the
// field; the same over JSON on the same port; and the metrics count per
// configured resource, the rest as "other".
func TestLimitsAllow(t *testing.T) {
	s, _, conn, addr := limitsServer(t)
	c := v1.NewLimitsClient(conn)
	ctx := t.Context()
	resp, err := c.Allow(ctx, &v1.AllowRequest{Resource: "api", Domain: "small", Tokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus() != v1.AllowResponse_OK || resp.GetGranted() != 4 || resp.GetWait().AsDuration() != 0 ||
		resp.GetRemaining() != 6 || resp.GetLimit() != 10 || resp.GetBucket() != "named" {
		t.Fatalf("first grant: %v", resp)
	}
	// 5 wanted, at least 1: the 5 the bucket allows per request (6 left).
	resp, err = c.Allow(ctx, &v1.AllowRequest{Resource: "api", Domain: "small", Tokens: 5, MinTokens: 1, MaxWait: durationpb.New(0)})
	if err != nil || resp.GetStatus() != v1.AllowResponse_OK || resp.GetGranted() != 5 {
		t.Fatalf("partial grant: %v, %v", resp, err)
	}
	resp, err = c.Allow(ctx, &v1.AllowRequest{Resource: "api", Domain: "small", Tokens: 5, MinTokens: 2, MaxWait: durationpb.New(0)})
	if err != nil || resp.GetStatus() != v1.AllowResponse_REJECTED_TIMEOUT || resp.GetRetryAfter().AsDuration() != 100*time.Millisecond {
		t.Fatalf("1 token left, at least 2 wanted now: %v, %v; want REJECTED_TIMEOUT, retry after 100ms", resp, err)
	}
	resp, err = c.Allow(ctx, &v1.AllowRequest{Resource: "api", Domain: "small", Tokens: 3, MaxWait: durationpb.New(time.Second)})
	if err != nil || resp.GetStatus() != v1.AllowResponse_OK || resp.GetWait().AsDuration() != 200*time.Millisecond {
		t.Fatalf("3 tokens with 1 left: %v, %v; want a 200ms wait", resp, err)
	}
	for _, tc := range []struct {
		req   *v1.AllowRequest
		field string
	}{
		{&v1.AllowRequest{Domain: "small"}, "resource"},
		{&v1.AllowRequest{Resource: "api", Domain: strings.Repeat("x", limits.MaxNameLen+1)}, "domain"},
		{&v1.AllowRequest{Resource: "api", Domain: "a b"}, "domain"},
		{&v1.AllowRequest{Resource: "api", Domain: "small", Tokens: -2}, "tokens"},
		{&v1.AllowRequest{Resource: "api", Domain: "small", Tokens: 2, MinTokens: 3}, "min_tokens"},
		{&v1.AllowRequest{Resource: "api", Domain: "small", MaxWait: durationpb.New(-time.Second)}, "max_wait"},
		{&v1.AllowRequest{Resource: "api", Domain: "small", MaxWait: &durationpb.Duration{Seconds: 1, Nanos: -1}}, "max_wait"},
	} {
		_, err := c.Allow(ctx, tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.HasPrefix(status.Convert(err).Message(), tc.field+":") {
			t.Errorf("Allow(%v): %v; want InvalidArgument naming %s", tc.req, err, tc.field)
		}
	}
	if n, _ := s.Limits().Engine().EstimateLen(t.Context()); n != 1 {
		t.Errorf("%d buckets after invalid requests, want only api/small", n)
	}
	// JSON over HTTP/1.1 on the same port.
	r, err := http.Post("http://"+addr+"/sluice.v1.Limits/Allow", "application/json",
		strings.NewReader(`{"resource":"logins","domain":"ann","maxWait":"0s"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"OK"`) || !strings.Contains(string(body), `"bucket":"dynamic"`) {
		t.Fatalf("JSON: %d %s", r.StatusCode, body)
	}
	r, err = http.Post("http://"+addr+"/quotaservice.QuotaService/Allow", "application/json",
		strings.NewReader(`{"namespace":"logins","bucketName":"ann"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusOK || !strings.Contains(string(body), `"tokensGranted":"1"`) {
		t.Fatalf("quota service JSON: %d %s", r.StatusCode, body)
	}
	counter := func(name string, labels map[string]string) float64 {
		t.Helper()
		v, _ := metricValue(t, s.Registry(), name, labels)
		return v
	}
	if got := counter("sluice_limits_events_total", map[string]string{"resource": "api", "event": "tokens_served"}); got != 3 {
		t.Errorf("events{api, tokens_served} = %v, want 3", got)
	}
	if got := counter("sluice_limits_tokens_granted_total", map[string]string{"resource": "api"}); got != 12 {
		t.Errorf("tokens granted{api} = %v, want 12", got)
	}
	if got := counter("sluice_limits_events_total", map[string]string{"resource": "logins", "event": "bucket_created"}); got != 1 {
		t.Errorf("events{logins, bucket_created} = %v, want 1", got)
	}
	// The malformed duration never reaches the engine: 6 of the 7.
	if got := counter("sluice_limits_events_total", map[string]string{"resource": "other", "event": "invalid_request"}); got != 6 {
		t.Errorf("events{other, invalid_request} = %v, want 6 (request names are never labels)", got)
	}
}

// failingStore is a limits store whose every decision fails, as a store
// that lost its Redis would.
type failingStore struct{ limits.Store }

var errStoreDown = errors.New("store down")

func (failingStore) Take(context.Context, int64, limits.Key, *limits.Limit, limits.Ask) (limits.Outcome, error) {
	return limits.Outcome{}, errStoreDown
}

// A store that fails: REJECTED_SERVER_ERROR on the quota service (a status,
// as every answer there), Unavailable on sluice.v1.Limits; both over gRPC.
func TestLimitsStoreFailure(t *testing.T) {
	cfg, err := limitsyaml.ParseQuotaService([]byte(fixture.QuotaService))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := startServer(t, Config{ID: "failing", Repository: Repository{Fixed: resources.Compose(nil, cfg, nil, nil)}, Store: Store{Shared: &Shared{Limits: failingStore{limits.NewMemoryStore()}}}})
	conn := testutil.Dial(t, s.Addr())
	resp, err := qs.NewQuotaServiceClient(conn).Allow(t.Context(), &qs.AllowRequest{Namespace: "api", BucketName: "small"})
	if err != nil || resp.GetStatus() != qs.AllowResponse_REJECTED_SERVER_ERROR {
		t.Errorf("quota service on a failed store: %v, %v; want REJECTED_SERVER_ERROR", resp, err)
	}
	_, err = v1.NewLimitsClient(conn).Allow(t.Context(), &v1.AllowRequest{Resource: "api", Domain: "small"})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "store down") {
		t.Errorf("sluice.v1 on a failed store: %v; want Unavailable saying why", err)
	}
}
