package rlsxds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-rl/sluice/internal/names"
	"github.com/sluice-rl/sluice/limits/rls"
)

// The defaults of envoyproxy/ratelimit's settings.
const (
	// DefaultNodeID is the node id when Options.NodeID is empty
	// (CONFIG_GRPC_XDS_NODE_ID's default).
	DefaultNodeID = "default"
	// DefaultRetryInterval is the wait between a failed dial or stream and
	// the next attempt when Options.RetryInterval is 0
	// (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL's default).
	DefaultRetryInterval = 3 * time.Second
)

// TypeURL is the type of the resources the source subscribes to:
// envoyproxy/ratelimit's RateLimitConfig, as Envoy Gateway serves them.
const TypeURL = resource.RateLimitConfigType

// OptionError is Options that New refuses: the field at fault (its name
// in Options, "ServerURL") and why.
type OptionError = names.FieldError

// ErrRunning is Run's error when the source already runs.
var ErrRunning = errors.New("rlsxds: the source already runs")

// Options configure a Source. The fields are envoyproxy/ratelimit's
// CONFIG_GRPC_XDS_* settings.
type Options struct {
	// ServerURL is the control plane's gRPC target ("host:port", or any
	// grpc-go target: "dns:///envoy-gateway:18001");
	// CONFIG_GRPC_XDS_SERVER_URL. Required.
	ServerURL string
	// NodeID is the node's id in every request: the control plane keeps
	// a snapshot per node id (Envoy Gateway's rate limit deployment says
	// "envoy-ratelimit"); "": DefaultNodeID. CONFIG_GRPC_XDS_NODE_ID.
	NodeID string
	// NodeMetadata is the node's metadata (string values); nil: none.
	// CONFIG_GRPC_XDS_NODE_METADATA.
	NodeMetadata map[string]string
	// TLS is the connection's TLS (its RootCAs verify the control plane,
	// its Certificates are the client's for mTLS, its ServerName the name
	// the control plane's certificate must carry: CONFIG_GRPC_XDS_SERVER_TLS_SAN);
	// nil: plaintext. CONFIG_GRPC_XDS_SERVER_USE_TLS and the
	// CONFIG_GRPC_XDS_*_TLS_* files.
	TLS *tls.Config
	// Headers are sent as gRPC metadata on the stream (keys are
	// lower-cased; "grpc-" keys are reserved and refused); nil: none.
	// CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS.
	Headers map[string]string
	// RetryInterval is the wait after a dial or a stream fails before the
	// next attempt, and between the NACKs of a rejected version the
	// control plane sends again; 0: DefaultRetryInterval; negative is an
	// error. CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL.
	RetryInterval time.Duration
	// MergeDomains merges resources of one domain (ConvertMerged) instead
	// of refusing them (Convert); MERGE_DOMAIN_CONFIG.
	MergeDomains bool
	// Logger receives the source's logs (versions applied and rejected,
	// connections lost); nil: slog.Default().
	Logger *slog.Logger
	// Apply installs a version's rules, whole; an error rejects the
	// version (NACK) and the rules in force stay. It is called from
	// Run's goroutine only, never for rules equal (rls.Config.Hash) to
	// those it last installed. Required.
	Apply func(*rls.Config) error
	// Rejected, when set, is told of each version rejected — its
	// version_info and why (a resource that cannot be read or converted,
	// or Apply's error) — once per version: the version the control
	// plane sends again is not told again. Called from Run's goroutine.
	Rejected func(version string, err error)
}

// Source follows the RateLimitConfig resources an xDS control plane
// serves (a state-of-the-world subscription over the aggregated
// discovery service, through go-control-plane's SotW client) and installs
// each version's rules with Options.Apply, all its domains at once. A
// Source's methods are safe for concurrent use; one Run runs at a time
// (another returns ErrRunning). A target that cannot be dialled (a bad
// ServerURL) shows as Run's retries failing (Err, the log), not as New's
// error.
type Source struct {
	opts    Options
	log     *slog.Logger
	node    *core.Node
	running atomic.Bool
	ready   atomic.Bool
	// connected: a stream is open and has delivered a response.
	connected atomic.Bool
	answers   *prometheus.CounterVec
	collector []prometheus.Collector

	mu      sync.Mutex
	version string // the version applied
	err     error  // the last failure, nil after a version applied

	// Run's goroutine only.
	applied  string // the hash of the rules last applied
	rejected string // the key (responseKey) of the response last rejected
}

// New returns a source of opts, which does nothing until Run. Errors
// (*OptionError): an empty ServerURL, a nil Apply, a negative RetryInterval, an empty or reserved
// ("grpc-…") header key, or one that is no HTTP/2 header name.
func New(opts Options) (*Source, error) {
	switch {
	case opts.ServerURL == "":
		return nil, names.FieldErr("ServerURL", "empty; want the control plane's host:port")
	case opts.Apply == nil:
		return nil, names.FieldErr("Apply", "nil; want the function that installs the rules")
	case opts.RetryInterval < 0:
		return nil, names.FieldErr("RetryInterval", "%v, want a positive duration (0: %v)", opts.RetryInterval, DefaultRetryInterval)
	}
	for k := range opts.Headers {
		if why := checkHeader(k); why != "" {
			return nil, names.FieldErr("Headers", "%q: %s", k, why)
		}
	}
	if opts.RetryInterval == 0 {
		opts.RetryInterval = DefaultRetryInterval
	}
	if opts.NodeID == "" {
		opts.NodeID = DefaultNodeID
	}
	s := &Source{opts: opts, log: opts.Logger, node: &core.Node{Id: opts.NodeID, UserAgentName: "sluice"}}
	if s.log == nil {
		s.log = slog.Default()
	}
	if len(opts.NodeMetadata) > 0 {
		fields := make(map[string]*structpb.Value, len(opts.NodeMetadata))
		for k, v := range opts.NodeMetadata {
			fields[k] = structpb.NewStringValue(v)
		}
		s.node.Metadata = &structpb.Struct{Fields: fields}
	}
	s.log = s.log.With("xds_server", opts.ServerURL, "node_id", opts.NodeID)
	s.answers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_envoy_xds_answers_total",
		Help: "Answers sent to the xDS control plane serving Envoy's rate limit rules, by result: ack (a version installed), nack (a version rejected).",
	}, []string{"result"})
	s.answers.WithLabelValues("ack")
	s.answers.WithLabelValues("nack")
	s.collector = []prometheus.Collector{s.answers, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "sluice_envoy_xds_connected",
		Help: "1 while a stream to the xDS control plane serving Envoy's rate limit rules is open and has delivered a response, else 0.",
	}, func() float64 {
		if s.connected.Load() {
			return 1
		}
		return 0
	})}
	return s, nil
}

// Collectors returns the source's metrics, for the caller to register:
// sluice_envoy_xds_connected (1 while a stream is open and has delivered
// a response; 0 while the control plane is away) and
// sluice_envoy_xds_answers_total{result="ack"|"nack"}.
func (s *Source) Collectors() []prometheus.Collector { return s.collector }

// checkHeader returns why k cannot be a header of the stream ("": it
// can).
func checkHeader(k string) string {
	k = strings.ToLower(k)
	switch {
	case k == "":
		return "an empty key"
	case strings.HasPrefix(k, "grpc-"):
		return "grpc- keys are reserved to gRPC"
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Sprintf("%q at byte %d; a header name has a-z 0-9 - _ .", c, i)
		}
	}
	return ""
}

// Ready reports whether a version has been applied since the source was
// made (it stays true when the control plane is lost later: the rules in
// force keep serving).
func (s *Source) Ready() bool { return s.ready.Load() }

// Version returns the version_info of the version applied last ("" before
// the first).
func (s *Source) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// Err returns the last failure — the dial or the stream failing, or a
// version rejected — or nil when the last version received was applied.
func (s *Source) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Source) setErr(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// Run follows the control plane until ctx ends, then returns nil: it
// dials Options.ServerURL, subscribes to TypeURL for the node, and for
// each response reads every resource (Convert, or ConvertMerged with
// Options.MergeDomains) and installs the rules with Options.Apply, all or
// nothing: then it acknowledges the version (ACK); else it rejects it
// (NACK, the error's text as error_detail), logs and reports it
// (Options.Rejected) once, and the rules in force stay. A version the
// control plane sends again after a NACK is rejected again after
// Options.RetryInterval, so that the two sides do not loop at the
// network's speed. When the dial or the stream fails (the control plane
// restarting, say), Run waits Options.RetryInterval and subscribes
// again, on a new connection; the first response then restates the
// control plane's state, and rules equal to those in force are not
// applied again. Errors: ErrRunning when Run already runs.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer s.running.Store(false)
	failures := 0 // attempts failed in a row, before a response
	for ctx.Err() == nil {
		received, err := s.follow(ctx)
		s.connected.Store(false)
		if ctx.Err() != nil {
			break
		}
		s.setErr(err)
		if received {
			failures = 0
		}
		// The first failure and every tenth after it are warned of; the
		// others are debug, so that a control plane away for long does
		// not flood the log.
		level := slog.LevelDebug
		if failures%10 == 0 {
			level = slog.LevelWarn
		}
		failures++
		s.log.Log(ctx, level, "xDS control plane unreachable or the stream ended; the rules in force stay, retrying",
			"err", err, "failures", failures, "retry_in", s.opts.RetryInterval)
		if !sleep(ctx, s.opts.RetryInterval) {
			break
		}
	}
	return nil
}

// follow runs one connection and its stream until either fails or ctx
// ends, and returns why; received reports a response received.
func (s *Source) follow(ctx context.Context) (received bool, err error) {
	creds := insecure.NewCredentials()
	if s.opts.TLS != nil {
		creds = credentials.NewTLS(s.opts.TLS)
	}
	// The response Fetch returned: go-control-plane's client hands out
	// only the resources, and the version is the response's.
	var last *discovery.DiscoveryResponse
	conn, err := grpc.NewClient(s.opts.ServerURL, grpc.WithTransportCredentials(creds),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return &recvHook{ClientStream: cs, recv: func(r *discovery.DiscoveryResponse) { last = r }}, nil
		}))
	if err != nil {
		return false, fmt.Errorf("dialing %s: %w", s.opts.ServerURL, err)
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(s.opts.Headers) > 0 {
		sctx = metadata.NewOutgoingContext(sctx, metadata.New(s.opts.Headers))
	}
	c := sotw.NewADSClient(sctx, s.node, TypeURL)
	if err := c.InitConnect(conn); err != nil {
		return false, fmt.Errorf("subscribing to %s: %w", TypeURL, err)
	}
	s.log.Debug("xDS stream open")
	for {
		resp, err := c.Fetch()
		if err != nil {
			return received, fmt.Errorf("receiving: %w", err)
		}
		if !received {
			received = true
			s.connected.Store(true)
			s.log.Info("xDS stream open: rules received", "version", last.GetVersionInfo())
		}
		version := last.GetVersionInfo()
		key := responseKey(version, resp.Resources)
		if err := s.install(version, resp.Resources); err != nil {
			if key == s.rejected {
				// Sent again, as go-control-plane's caches do after a
				// NACK: reject it again, but not at once.
				if !sleep(ctx, s.opts.RetryInterval) {
					return received, ctx.Err()
				}
			} else {
				s.rejected = key
				s.log.Error("xDS rules rejected (NACK); the rules in force stay", "version", version, "err", err)
				if s.opts.Rejected != nil {
					s.opts.Rejected(version, err)
				}
			}
			s.setErr(err)
			s.answers.WithLabelValues("nack").Inc()
			if err := c.Nack(err.Error()); err != nil {
				return received, fmt.Errorf("sending a NACK: %w", err)
			}
			continue
		}
		s.rejected = ""
		s.answers.WithLabelValues("ack").Inc()
		if err := c.Ack(); err != nil {
			return received, fmt.Errorf("sending an ACK: %w", err)
		}
	}
}

// install reads the resources of a response and applies their rules
// (unless equal to those applied last), recording version.
func (s *Source) install(version string, resources []*anypb.Any) error {
	configs := make([]*rlsconfv3.RateLimitConfig, 0, len(resources))
	var errs []error
	for i, r := range resources {
		c := new(rlsconfv3.RateLimitConfig)
		if r.GetTypeUrl() != TypeURL {
			errs = append(errs, fmt.Errorf("resource [%d]: type %s, want %s", i, r.GetTypeUrl(), TypeURL))
			continue
		}
		if err := anypb.UnmarshalTo(r, c, proto.UnmarshalOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("resource [%d]: %w", i, err))
			continue
		}
		configs = append(configs, c)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// A snapshot cache sends a version's resources in any order: read
	// them in their names' (the order ConvertMerged merges in).
	slices.SortStableFunc(configs, func(a, b *rlsconfv3.RateLimitConfig) int { return strings.Compare(a.GetName(), b.GetName()) })
	convert := Convert
	if s.opts.MergeDomains {
		convert = ConvertMerged
	}
	cfg, err := convert(configs)
	if err != nil {
		return err
	}
	if h := cfg.Hash(); h != s.applied || !s.ready.Load() {
		if err := s.opts.Apply(cfg); err != nil {
			return fmt.Errorf("applying the rules: %w", err)
		}
		s.applied = h
		s.log.Info("xDS rules applied", "version", version, "domains", cfg.Len(), "hash", h)
	} else {
		s.log.Debug("xDS rules unchanged", "version", version, "hash", h)
	}
	s.mu.Lock()
	s.version, s.err = version, nil
	s.mu.Unlock()
	s.ready.Store(true)
	return nil
}

// responseKey identifies a response's content: its version and a digest
// of its resources (a control plane that sends no version_info is told
// apart by its content).
func responseKey(version string, resources []*anypb.Any) string {
	h := sha256.New()
	for _, r := range resources {
		fmt.Fprintf(h, "%d %s %d\n", len(r.GetTypeUrl()), r.GetTypeUrl(), len(r.GetValue()))
		h.Write(r.GetValue())
	}
	return fmt.Sprintf("%s %x", version, h.Sum(nil))
}

// recvHook is a client stream that shows each response it receives to
// recv before its caller sees it.
type recvHook struct {
	grpc.ClientStream
	recv func(*discovery.DiscoveryResponse)
}

func (h *recvHook) RecvMsg(m any) error {
	err := h.ClientStream.RecvMsg(m)
	if r, ok := m.(*discovery.DiscoveryResponse); ok && err == nil {
		h.recv(r)
	}
	return err
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
