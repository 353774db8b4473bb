package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Refusal reports whether err says that Redis answered but refused this
// client: its credentials (WRONGPASS, NOAUTH: a wrong or missing password
// or user, a disabled default user) or its TLS handshake (a certificate
// signed by a CA the client does not trust or for another name, an alert
// from Redis such as "certificate required" or "unknown ca"). Such an error is not transient: waiting does not
// mend it, a change of configuration (or of Redis's) does. At Open it is
// a configuration error; afterwards the store counts it
// (StoreHealth.Refusals), shows it (StoreHealth.Refusal) and logs it once
// per change, and its circuit breaker treats it as Redis unavailable.
//
// Source: Redis's AUTH and ACL documentation (the WRONGPASS and NOAUTH
// errors), Go's crypto/tls and crypto/x509 errors.
func Refusal(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if errors.As(err, &re) {
		return authRefusal(re.Error())
	}
	return tlsRefusal(err) || authRefusal(err.Error())
}

// authRefusal reports whether msg, an error reply of Redis, refuses the
// credentials.
func authRefusal(msg string) bool {
	for _, p := range refusalPrefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// refusalPrefixes start Redis's replies refusing a client's credentials.
var refusalPrefixes = []string{"WRONGPASS", "NOAUTH", "ERR invalid password", "ERR AUTH <password> called without any password"}

// tlsRefusal reports whether err is a TLS handshake refused by either
// side (see Refusal).
func tlsRefusal(err error) bool {
	var (
		cve *tls.CertificateVerificationError
		rhe tls.RecordHeaderError
		uae x509.UnknownAuthorityError
		he  x509.HostnameError
		ci  x509.CertificateInvalidError
		ae  tls.AlertError
	)
	if errors.As(err, &cve) || errors.As(err, &rhe) || errors.As(err, &uae) || errors.As(err, &he) || errors.As(err, &ci) || errors.As(err, &ae) {
		return true
	}
	// An alert Redis sent (certificate required, bad certificate,
	// unknown CA) reaches the client as a *net.OpError "remote error"
	// around crypto/tls's unexported alert type.
	return strings.Contains(err.Error(), "remote error: tls: ")
}

// noteRefusal records err, a Refusal, met by a round trip, a probe or the
// store's reach loop: counted always, logged when its text differs from
// the refusal before it (once per change, not once per call).
func (s *Store) noteRefusal(err error) {
	s.refusals.Add(1)
	msg := err.Error()
	s.mu.Lock()
	changed := msg != s.refusal
	s.refusal, s.refusalAt = msg, time.Now()
	s.mu.Unlock()
	s.refusing.Store(true)
	if changed {
		s.log.Error("Redis refuses this server's credentials or TLS: check the password, the user and the certificates (limits decisions fail meanwhile)", "err", err)
	}
}

// noteAnswer records that Redis answered: the store has reached it, and a
// refusal noted before is over (logged once). It costs one atomic load
// when nothing changes (the request path calls it).
func (s *Store) noteAnswer() {
	if s.unanswered.Load() {
		s.unanswered.Store(false)
	}
	if !s.refusing.Load() {
		return
	}
	s.mu.Lock()
	was := s.refusal
	s.refusal, s.refusalAt = "", time.Time{}
	s.mu.Unlock()
	if s.refusing.CompareAndSwap(true, false) && was != "" {
		s.log.Info("Redis accepts this server's credentials again", "was", was)
	}
}

// startReach starts the loop that pings Redis every Options.BreakerProbe
// (each PING bounded by Options.Timeout) until it answers once or the
// store is closed: Open starts it when Redis did not answer its first
// PING, so that Health().Unanswered turns false without waiting for a
// request. It is a goroutine of the store's, stopped by Close.
func (s *Store) startReach() {
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if s.closing.Err() != nil {
		return
	}
	s.probeWG.Add(1)
	go func() {
		defer s.probeWG.Done()
		t := time.NewTicker(s.probe)
		defer t.Stop()
		for s.unanswered.Load() {
			select {
			case <-s.closing.Done():
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(s.closing, s.timeout)
			err := s.c.Ping(ctx).Err()
			cancel()
			switch {
			case err == nil:
				s.noteAnswer()
			case Refusal(err):
				s.noteRefusal(err)
				fallthrough
			default:
				s.noteLastError(err)
			}
		}
	}()
}

// noteLastError records err as the store's last error (Health's
// LastError) without counting a failed round trip: Open's first PING and
// the reach loop's.
func (s *Store) noteLastError(err error) {
	s.mu.Lock()
	s.lastErr, s.lastErrAt = err.Error(), time.Now()
	s.mu.Unlock()
}
