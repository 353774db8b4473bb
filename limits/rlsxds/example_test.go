package rlsxds_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/sluice-rl/sluice/limits/rls"
	"github.com/sluice-rl/sluice/limits/rlsxds"
)

// Convert reads the resources of one version as envoyproxy/ratelimit
// reads its files, and refuses a bad one naming the resource and field.
func ExampleConvert() {
	cfg, err := rlsxds.Convert([]*rlsconfv3.RateLimitConfig{{
		Name:   "default/eg/http",
		Domain: "default/eg/http",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key:       "remote_address",
			RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 100},
		}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	m := cfg.Match("default/eg/http", []rls.Entry{{Key: "remote_address", Value: "192.0.2.7"}})
	fmt.Println(m.Rule.Limit.RequestsPerUnit, "per", m.Rule.Limit.Unit)

	_, err = rlsxds.Convert([]*rlsconfv3.RateLimitConfig{{
		Name:        "bad",
		Domain:      "edge",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{Key: "remote_address", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 5}}},
	}})
	fmt.Println(err)
	// Output:
	// 100 per minute
	// RateLimitConfig "bad": descriptors[0].rate_limit.unit: missing (second, minute, hour, day, week, month or year)
}

// A Source follows Envoy Gateway's control plane over mTLS, installing
// each version's rules until the process is told to stop.
func ExampleNew() {
	cert, err := tls.LoadX509KeyPair("/certs/tls.crt", "/certs/tls.key")
	if err != nil {
		log.Fatal(err)
	}
	ca, err := os.ReadFile("/certs/ca.crt")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	tc := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, RootCAs: roots}
	var rules func(*rls.Config) // the rate limit service's, e.g. envoyrls.Service.SetConfig
	src, err := rlsxds.New(rlsxds.Options{
		ServerURL: "envoy-gateway.envoy-gateway-system.svc:18001",
		NodeID:    "envoy-ratelimit",
		TLS:       tc,
		Apply:     func(c *rls.Config) error { rules(c); return nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	_ = src.Run(ctx) // until SIGTERM
}
