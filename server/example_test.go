package server_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluice-rl/sluice/resources"
	"github.com/sluice-rl/sluice/server"
)

// A standalone server on a free port of loopback, with Envoy's RLQS
// answering DENY_ALL to buckets no template matches, served until its
// context ends and then drained.
func ExampleNew() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	srv, err := server.New(ctx, server.Config{
		Listen:     server.Listen{Address: "127.0.0.1:0", Grace: time.Second},
		Runtime:    server.Runtime{Logger: slog.New(slog.DiscardHandler)},
		Repository: server.Repository{Fixed: resources.Compose(nil, nil, nil, nil)},
		RLQS:       server.RLQS{Unconfigured: typev3.RateLimitStrategy_DENY_ALL},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	// Clients dial srv.Addr() here.
	stop()
	fmt.Println("stopped:", <-done)
	// Output: stopped: <nil>
}

// New refuses a Config naming the field at fault.
func ExampleFieldError() {
	_, err := server.New(context.Background(), server.Config{Envoy: server.EnvoyRateLimit{NearLimitRatio: 2}})
	var fe *server.FieldError
	if errors.As(err, &fe) {
		fmt.Println(fe.Field)
	}
	fmt.Println(err)
	// Output:
	// Envoy.NearLimitRatio
	// Envoy.NearLimitRatio: 2, want a fraction in (0, 1]
}
