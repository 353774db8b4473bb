package limits

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
)

// Label values: every label of the client's metrics takes one of these
// few values (bounded cardinality: no label per resource or domain).
type (
	mode    uint8  // decisions: who asked
	outcome uint8  // decisions: what came of it
	result  string // requests to the service: what came of them
)

const (
	modeManual  mode = iota // Allow, Reserve
	modeNaive               // Acquire, interceptors, RoundTripper
	modeSmart               // the same, WithSmart
	modeRequest             // Request (Charon's rate-limited requests)
	modeCopies              // ReserveCopies (Charon's holds)
	nModes
)

var modeNames = [nModes]string{"manual", "naive", "smart", "request", "copies"}

const (
	outcomeAllowed outcome = iota
	outcomeRejected
	outcomeFallbackAllowed
	outcomeFallbackRejected
	outcomeError      // invalid, ctx ended, deadline, unavailable (manual)
	outcomeDegraded   // Charon's calls: failed open
	outcomeKillSwitch // Charon's calls: a rejection the kill switch granted
	nOutcomes
)

var outcomeNames = [nOutcomes]string{"allowed", "rejected", "fallback_allowed", "fallback_rejected", "error", "degraded", "kill_switch"}

const (
	resultOK          result = "ok"
	resultRejected    result = "rejected" // REJECTED_TIMEOUT, TOO_MANY_*
	resultNoBucket    result = "no_bucket"
	resultInvalid     result = "invalid"
	resultServerError result = "server_error"
	resultTimeout     result = "timeout"
	resultUnavailable result = "unavailable"
	resultCanceled    result = "canceled" // the caller's context ended
	resultBreakerOpen result = "breaker_open"
	// Charon's calls' client errors besides invalid.
	resultNotFound           result = "not_found"
	resultFailedPrecondition result = "failed_precondition"
	resultClientError        result = "client_error" // Unimplemented, PermissionDenied, ...

	callManual = "manual" // Allow, Reserve
	callDecide = "decide" // the naive mode's request per call
	callTopUp  = "topup"  // the smart mode's batched request
	callReport = "report" // a flush of Report's batch

	// Charon's calls.
	callRequest      = "request"       // Request
	callReserve      = "reserve"       // ReserveCopies
	callRelease      = "release"       // Hold.Release
	callTransfer     = "transfer"      // Hold.Transfer
	callSeize        = "seize"         // Seize
	callOpenSession  = "open_session"  // the session, opened lazily
	callKeepAlive    = "keep_alive"    // a keep-alive stream (one per connection)
	callCloseSession = "close_session" // Close

	// sluice_quota_client_degraded_total's reasons besides the results.
	reasonKillSwitch = "kill_switch"
	reasonStore      = "store" // the service granted while its store was down
)

// metrics are the client's Prometheus metrics (see the package doc).
type metrics struct {
	decisions    *prometheus.CounterVec
	fallbacks    *prometheus.CounterVec
	rpcs         *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	breakerState prometheus.GaugeFunc
	breakerTrips prometheus.Counter
	localTokens  *prometheus.CounterVec
	reported     prometheus.Counter
	charged      prometheus.Counter
	dropped      *prometheus.CounterVec
	degraded     *prometheus.CounterVec
	sessions     *prometheus.CounterVec

	// The hot paths' series, resolved once.
	decided                            [nModes][nOutcomes]prometheus.Counter
	localUsed, localFetched, localGone prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_client_decisions_total",
			Help: "Decisions on calls, by mode (manual, naive, smart, request, copies) and outcome (allowed, rejected, fallback_allowed, fallback_rejected, error, degraded, kill_switch).",
		}, []string{"mode", "outcome"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_client_fallbacks_total",
			Help: "Decisions left to the fallback limiter, by reason (timeout, unavailable, server_error, breaker_open, no_bucket).",
		}, []string{"reason"}),
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_client_requests_total",
			Help: "Requests to the limits service, by call (manual, decide, topup, report, request, reserve, release, transfer, seize, open_session, keep_alive, close_session) and result (ok, rejected, no_bucket, invalid, not_found, failed_precondition, client_error, server_error, timeout, unavailable, canceled, breaker_open: not sent).",
		}, []string{"call", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_quota_client_request_duration_seconds",
			Help:    "Latency of the requests sent to the limits service, in seconds, by call.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"call"}),
		breakerTrips: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_quota_client_breaker_trips_total",
			Help: "Times the circuit breaker opened.",
		}),
		localTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_client_local_tokens_total",
			Help: "Tokens of the smart mode's local buckets, by event (fetched from the service, used by calls, expired unused).",
		}, []string{"event"}),
		reported: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_quota_client_reported_tokens_total",
			Help: "Tokens reported after the fact (Report) and accepted into a batch.",
		}),
		charged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_quota_client_report_charged_tokens_total",
			Help: "Reported tokens the service has charged.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_client_report_dropped_tokens_total",
			Help: "Reported tokens never charged, by reason (invalid: bad request; rejected: the service can never charge them; backlog: too many targets or tokens waiting; closed: unsent at Close).",
		}, []string{"reason"}),
		degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_client_degraded_total",
			Help: "Grants made in a degraded mode, by call (request, reserve; and manual, decide, topup, report for reason store) and reason (unavailable, timeout, server_error: Charon's calls failed open with the minimum asked; kill_switch: a rejection the kill switch turned into a grant; store: the service granted while its store could not be reached, on_store_error: open, without checking the shared limit).",
		}, []string{"call", "reason"}),
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_quota_client_session_events_total",
			Help: "Events of the client's session, by event (opened; reconnected: a keep-alive stream resumed after a break; lost: ended without Close, its holds gone; closed).",
		}, []string{"event"}),
	}
	for md := range nModes {
		for o := range nOutcomes {
			m.decided[md][o] = m.decisions.WithLabelValues(modeNames[md], outcomeNames[o])
		}
	}
	m.localUsed = m.localTokens.WithLabelValues("used")
	m.localFetched = m.localTokens.WithLabelValues("fetched")
	m.localGone = m.localTokens.WithLabelValues("expired")
	return m
}

// register registers every metric with reg; on an error it unregisters
// those it had registered.
func (m *metrics) register(reg prometheus.Registerer) error {
	cs := []prometheus.Collector{m.decisions, m.fallbacks, m.rpcs, m.latency, m.breakerState, m.breakerTrips,
		m.localTokens, m.reported, m.charged, m.dropped, m.degraded, m.sessions}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("limits: registering metrics: %w", err)
		}
	}
	return nil
}

// decision counts one decision.
func (m *metrics) decision(md mode, o outcome) { m.decided[md][o].Inc() }

// record counts the decision of a call of mode md that returned g, err.
func (m *metrics) record(md mode, g Grant, err error) {
	switch {
	case err == nil && g.Source == FromFallback:
		m.decision(md, outcomeFallbackAllowed)
	case err == nil:
		m.decision(md, outcomeAllowed)
	default:
		m.decision(md, rejectedOutcome(err))
	}
}

// rejectedOutcome is the outcome of a call that failed with err.
func rejectedOutcome(err error) outcome {
	var rej *RejectedError
	switch {
	case !errors.As(err, &rej):
		return outcomeError
	case rej.Fallback:
		return outcomeFallbackRejected
	}
	return outcomeRejected
}

// storeDegraded counts a grant of call that the service made while its
// store could not be reached (when degraded).
func (m *metrics) storeDegraded(call string, degraded bool) {
	if degraded {
		m.degraded.WithLabelValues(call, reasonStore).Inc()
	}
}

// rpc counts one request sent at start.
func (m *metrics) rpc(call string, start time.Time, r result) {
	m.rpcs.WithLabelValues(call, string(r)).Inc()
	m.latency.WithLabelValues(call).Observe(time.Since(start).Seconds())
}

// resultOfStatus is the result of an answered request.
func resultOfStatus(s sluicev1.AllowResponse_Status) result {
	switch s {
	case sluicev1.AllowResponse_OK:
		return resultOK
	case sluicev1.AllowResponse_REJECTED_NO_BUCKET:
		return resultNoBucket
	case sluicev1.AllowResponse_STATUS_UNSPECIFIED:
		return resultServerError
	}
	return resultRejected
}

// resultOfReserve is the result of an answered Reserve.
func resultOfReserve(s sluicev1.ReserveResponse_Status) result {
	switch s {
	case sluicev1.ReserveResponse_OK:
		return resultOK
	case sluicev1.ReserveResponse_STATUS_UNSPECIFIED:
		return resultServerError
	}
	return resultRejected
}
