package limits

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	sluicev1 "github.com/sluice-rl/sluice/api/sluice/v1"
)

// WithSessionTTL sets the ttl the client asks for its session (default
// DefaultSessionTTL, 10 s; the service bounds it, 1 s to 1 h, and the
// client uses the ttl it answers). The client renews the session every
// third of its ttl over a keep-alive stream; the service releases the
// session's holds when the ttl passes without a renewal — a client killed
// or cut off holds its copies at most that long (less when the service
// sees its keep-alive stream break). d ≤ 0 keeps the default.
//
// Source: charon-paper.md, section 4.3.1; OpenSessionRequest's ttl in
// api/sluice/v1/limits.proto.
func WithSessionTTL(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.ch.sessionTTL = d
		}
	}
}

// WithSessionLost sets a function called once for each session the
// client loses — one that ends without Close: the service no longer knows
// it (its keep-alive stream broke, or its ttl passed), or it could not be
// renewed within its ttl. Every copy the session held is gone: its Holds'
// Err wraps ErrSessionLost (err is that error), and a Do running on one
// sees its context cancelled with that cause. The next call that needs a
// session opens a new one. f runs on a goroutine of its own, which Close
// waits for: f may use the client and its holds, but must not call Close
// (nor wait for something Close does). A session lost while the client
// closes is not reported.
func WithSessionLost(f func(id string, err error)) Option {
	return func(c *Client) { c.ch.onSessionLost = f }
}

// sessions is the client's session: opened lazily by the first call that
// needs one, kept alive in the background, replaced when lost.
type sessions struct {
	mu      sync.Mutex
	cur     *session      // nil: none yet, or lost
	opening chan struct{} // closed when the OpenSession in flight ends; nil: none
}

// session is a session the client opened.
type session struct {
	id    string
	ttl   atomic.Int64 // ns: the service's
	acked atomic.Int64 // Unix ns of the last renewal the service confirmed (or the open)
	ended atomic.Bool
	ctx   context.Context // cancelled, with ErrClosed or the loss as cause, when the session ends
	end   context.CancelCauseFunc
}

// err returns nil while s is live, else why it ended (ErrClosed, or an
// error wrapping ErrSessionLost).
func (s *session) err() error {
	if s.ctx.Err() == nil {
		return nil
	}
	return context.Cause(s.ctx)
}

// finish ends s with cause; false if it had ended already.
func (s *session) finish(cause error) bool {
	if s.ended.Swap(true) {
		return false
	}
	s.end(cause)
	return true
}

// interval is how often s is renewed: a third of its ttl.
func (s *session) interval() time.Duration {
	return max(time.Duration(s.ttl.Load())/3, time.Millisecond)
}

// shortID abbreviates a session or transfer id for logs and messages (ids
// are capabilities).
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8] + "…"
	}
	return id
}

// unavailableError is a request of Charon's calls that the service did
// not answer, or answered with a server error: it wraps ErrUnavailable
// and the cause; res is the metrics' result (timeout, unavailable,
// server_error).
type unavailableError struct {
	op    string
	res   result
	addr  string
	cause error
}

func (e *unavailableError) Error() string {
	return fmt.Sprintf("%s: %s: %s: %v", ErrUnavailable, e.addr, e.op, e.cause)
}

func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

// session returns the client's live session, opening one if there is
// none (one OpenSession at a time; concurrent callers wait for it).
// Errors: ErrClosed, ctx's (wrapped), *unavailableError, *ClientError.
func (ch *charon) session(ctx context.Context) (*session, error) {
	c := ch.c
	for {
		ch.sess.mu.Lock()
		if c.closed.Load() {
			ch.sess.mu.Unlock()
			return nil, ErrClosed
		}
		if s := ch.sess.cur; s != nil && s.err() == nil {
			ch.sess.mu.Unlock()
			return s, nil
		}
		if w := ch.sess.opening; w != nil {
			ch.sess.mu.Unlock()
			select {
			case <-w:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("limits: waiting for a session: %w", ctx.Err())
			}
		}
		w := make(chan struct{})
		ch.sess.opening = w
		ch.sess.mu.Unlock()

		s, err := ch.openSession(ctx)
		ch.sess.mu.Lock()
		ch.sess.opening = nil
		close(w)
		closed := c.closed.Load()
		if err == nil && !closed {
			ch.sess.cur = s
		}
		ch.sess.mu.Unlock()
		switch {
		case err != nil:
			return nil, err
		case closed:
			// Close ran meanwhile and did not see s: close it here.
			ch.endSession(s)
			return nil, ErrClosed
		}
		if !c.background(func() { ch.keepAlive(s) }) {
			return nil, ErrClosed // Close has s, and closes it
		}
		return s, nil
	}
}

// openSession opens a session with the client's ttl.
func (ch *charon) openSession(ctx context.Context) (*session, error) {
	c := ch.c
	var resp *connect.Response[sluicev1.OpenSessionResponse]
	sent, timedOut, err := ch.call(ctx, func(rctx context.Context) (err error) {
		resp, err = c.stub.OpenSession(rctx, connect.NewRequest(&sluicev1.OpenSessionRequest{Ttl: durationpb.New(ch.sessionTTL)}))
		return err
	})
	if err == nil && resp.Msg.GetSessionId() == "" {
		err = connect.NewError(connect.CodeInternal, errors.New("an answer without a session_id"))
	}
	if err != nil {
		f, res := classify(ctx, timedOut, err)
		c.m.rpc(callOpenSession, sent, res)
		switch f {
		case failCaller:
			return nil, fmt.Errorf("limits: opening a session: %w", ctx.Err())
		case failClient:
			return nil, clientError(callOpenSession, "", "", err)
		}
		return nil, &unavailableError{op: "opening a session", res: res, addr: c.addr, cause: err}
	}
	c.m.rpc(callOpenSession, sent, resultOK)
	ch.answered()
	s := &session{id: resp.Msg.GetSessionId()}
	ttl := resp.Msg.GetTtl().AsDuration()
	if ttl <= 0 {
		ttl = ch.sessionTTL
	}
	s.ttl.Store(int64(ttl))
	s.acked.Store(c.now().UnixNano())
	s.ctx, s.end = context.WithCancelCause(context.Background())
	c.m.sessions.WithLabelValues("opened").Inc()
	c.log.Debug("limits: session opened", "session", shortID(s.id), "ttl", ttl)
	return s, nil
}

// loseSession ends s as lost (cause: why) unless it has ended already,
// and tells WithSessionLost's function.
func (ch *charon) loseSession(s *session, cause error) {
	c := ch.c
	err := fmt.Errorf("%w: session %s: %v", ErrSessionLost, shortID(s.id), cause)
	if !s.finish(err) {
		return
	}
	ch.sess.mu.Lock()
	if ch.sess.cur == s {
		ch.sess.cur = nil
	}
	ch.sess.mu.Unlock()
	c.m.sessions.WithLabelValues("lost").Inc()
	c.log.Warn("limits: session lost: its holds are gone", "session", shortID(s.id), "err", cause)
	if f := ch.onSessionLost; f != nil {
		c.background(func() { f(s.id, err) })
	}
}

// closeSession is Close's: it ends the current session (ErrClosed) and
// closes it at the service.
func (ch *charon) closeSession() {
	ch.sess.mu.Lock()
	s := ch.sess.cur
	ch.sess.cur = nil
	ch.sess.mu.Unlock()
	if s != nil {
		ch.endSession(s)
	}
}

// endSession ends s (ErrClosed): its keep-alive stops, and CloseSession
// asks the service to release its holds (best effort, within 2 s; the
// service ends it anyway when its keep-alive stream breaks or its ttl
// passes).
func (ch *charon) endSession(s *session) {
	c := ch.c
	if !s.finish(ErrClosed) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.stub.CloseSession(ctx, connect.NewRequest(&sluicev1.CloseSessionRequest{SessionId: s.id}))
	res := resultOK
	if err != nil {
		_, res = classify(context.Background(), ctx.Err() != nil, err)
		c.log.Debug("limits: closing the session", "session", shortID(s.id), "err", err)
	}
	c.m.rpc(callCloseSession, start, res)
	c.m.sessions.WithLabelValues("closed").Inc()
}

// keepAlive keeps s alive until it ends or the client closes: one
// keep-alive stream at a time, renewing s every third of its ttl; when a
// stream breaks, it opens another at once, then after backoff sleeps
// (jitter(2^i) units, within what is left of the ttl). s is lost when the
// service answers NotFound (it ended s: a stream break, or its ttl), or
// when its ttl passes without a renewal the service confirmed.
func (ch *charon) keepAlive(s *session) {
	c := ch.c
	first := true
	for i := 0; ; i++ {
		acked, err := ch.keepAliveStream(s, first)
		first = false
		if s.err() != nil || c.ctx.Err() != nil {
			return
		}
		if acked {
			i = 0
		}
		if connect.CodeOf(err) == connect.CodeNotFound || errors.Is(err, errSessionExpired) {
			ch.loseSession(s, err)
			return
		}
		left := time.Duration(s.acked.Load() + s.ttl.Load() - c.now().UnixNano())
		if left <= 0 {
			ch.loseSession(s, fmt.Errorf("not renewed within its ttl (%v): %w", time.Duration(s.ttl.Load()), err))
			return
		}
		c.log.Debug("limits: keep-alive stream broke; resuming", "session", shortID(s.id), "err", err)
		if i == 0 {
			continue // at once: the service ends a session soon after its stream breaks
		}
		t := time.NewTimer(min(ch.retryDelay(i), left))
		select {
		case <-t.C:
		case <-s.ctx.Done():
		case <-c.ctx.Done():
		}
		t.Stop()
	}
}

// errSessionExpired: the service confirmed no renewal within the ttl.
var errSessionExpired = errors.New("no renewal confirmed within the session's ttl")

// keepAliveStream runs one keep-alive stream for s until it breaks (its
// error), s ends or the client closes (nil). acked reports that the
// service confirmed a renewal on it.
func (ch *charon) keepAliveStream(s *session, first bool) (acked bool, err error) {
	c := ch.c
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	start := time.Now()
	st := c.stub.KeepAlive(ctx)
	req := &sluicev1.KeepAliveRequest{SessionId: s.id}
	var got atomic.Bool
	recv := make(chan error, 1)
	receive := func() {
		for {
			r, err := st.Receive()
			if err != nil {
				recv <- err
				return
			}
			if d := r.GetTtl().AsDuration(); d > 0 {
				s.ttl.Store(int64(d))
			}
			s.acked.Store(c.now().UnixNano())
			if !got.Swap(true) && !first {
				c.m.sessions.WithLabelValues("reconnected").Inc()
				c.log.Info("limits: keep-alive stream resumed", "session", shortID(s.id))
			}
		}
	}
	// end closes the stream and returns what broke it.
	end := func(err error) (bool, error) {
		cancel()
		_ = st.CloseRequest()
		_ = st.CloseResponse()
		res := resultOK
		if err != nil && s.err() == nil && c.ctx.Err() == nil {
			_, res = classify(context.Background(), false, err)
		}
		c.m.rpc(callKeepAlive, start, res)
		if s.err() != nil || c.ctx.Err() != nil {
			return got.Load(), nil
		}
		return got.Load(), err
	}
	if err := st.Send(req); err != nil {
		go receive()
		return end(<-recv)
	}
	go receive()
	t := time.NewTimer(s.interval())
	defer t.Stop()
	for {
		select {
		case err := <-recv:
			return end(err)
		case <-ctx.Done():
			_ = st.CloseRequest()
			err := <-recv
			return end(err)
		case <-t.C:
			if c.now().UnixNano()-s.acked.Load() >= s.ttl.Load() {
				cancel()
				<-recv
				return end(errSessionExpired)
			}
			if err := st.Send(req); err != nil {
				// The receiving side has the reason (the service's error).
				select {
				case err = <-recv:
				case <-time.After(ch.callTimeout):
					cancel()
					<-recv
				}
				return end(err)
			}
			t.Reset(s.interval())
		}
	}
}

// sessionGone reports whether a NotFound answer is about the session
// (the service no longer knows it) rather than the resource or the
// transfer: the service's message names the field first, "session_id: …"
// (package limits/copies' *Error).
func sessionGone(err error) bool {
	if connect.CodeOf(err) != connect.CodeNotFound {
		return false
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return false
	}
	return strings.HasPrefix(ce.Message(), "session_id:") || strings.Contains(ce.Message(), "unknown session")
}
