// Command godriver is Go's interop driver: it serves the cross-language
// interop suite's JSON-lines protocol (docs/python.md, "The interop
// driver"; interop/doc.go) with Sluice's Go client packages — client for
// leases and their rate limiters, client/limits for Allow and copies — so
// that the suite drives Go clients exactly as it drives every other
// language's.
//
//	scripts/interop-driver go --server 127.0.0.1:15000 --client-id go-1
//
// It reads one JSON object per line on standard input and writes one JSON
// object per line answering it, in order, on standard output; logs go to
// standard error. Any failure answers {"error":{"code":CODE,"message":…}}
// with CODE a gRPC code's name, and the driver keeps serving; "close"
// closes the clients and exits 0, as does the end of standard input.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/sluice-rl/sluice/client"
	"github.com/sluice-rl/sluice/client/limits"
	"github.com/sluice-rl/sluice/internal/tlsutil"
)

// burstSeconds is the burst of every rate limiter the driver binds to a
// lease (the interop suite's bound on what a run may take).
const burstSeconds = 0.1

// command is one line of the protocol; which fields count depends on Op.
type command struct {
	Op       string   `json:"op"`
	ID       string   `json:"id"`
	Wants    *float64 `json:"wants"`
	Seconds  float64  `json:"seconds"`
	Resource string   `json:"resource"`
	Domain   string   `json:"domain"`
	Tokens   int64    `json:"tokens"`
	Copies   int64    `json:"copies"`
	Min      int64    `json:"min"`
	Hold     *int64   `json:"hold"`
}

// failure is an error answer: a gRPC code's name and a message.
type failure struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (f *failure) Error() string { return f.Code + ": " + f.Message }

func fail(code connect.Code, format string, args ...any) *failure {
	return &failure{Code: codeName(code), Message: fmt.Sprintf(format, args...)}
}

// codeName is a code's name as gRPC spells it: INVALID_ARGUMENT.
func codeName(c connect.Code) string { return strings.ToUpper(c.String()) }

// driver is the state of one driver process: its clients, the resources
// it leases with their limiters, and the holds it was granted.
type driver struct {
	leases   *client.Client
	limits   *limits.Client
	res      map[string]*client.Resource
	limiters map[string]*client.RateLimiter
	holds    map[int64]*limits.Hold
	nextHold int64
}

func main() {
	server := flag.String("server", "", "the Sluice server (host:port)")
	id := flag.String("client-id", "", "the client id")
	ca := flag.String("tls-ca", "", "speak TLS, verifying the server with these CAs (PEM)")
	cert := flag.String("tls-cert", "", "client certificate (PEM) for mTLS")
	key := flag.String("tls-key", "", "the private key of --tls-cert (PEM)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if *server == "" || *id == "" {
		fmt.Fprintln(os.Stderr, "usage: godriver --server HOST:PORT --client-id ID [--tls-ca F [--tls-cert F --tls-key F]]")
		os.Exit(2)
	}
	lopts := []client.Option{client.WithID(*id), client.WithLogger(log)}
	limOpts := []limits.Option{limits.WithLogger(log), limits.WithCallTimeout(5 * time.Second), limits.WithSessionTTL(5 * time.Second),
		limits.WithFailOpen(false)} // the suite checks the server's answers, not the clients' degraded grants
	if *ca != "" {
		cfg, err := tlsutil.Client(*ca, *cert, *key)
		if err != nil {
			fmt.Fprintln(os.Stderr, "godriver:", err)
			os.Exit(2)
		}
		lopts = append(lopts, client.WithTLS(cfg))
		limOpts = append(limOpts, limits.WithTLS(cfg))
	}
	lc, err := client.New(*server, lopts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "godriver:", err)
		os.Exit(2)
	}
	lim, err := limits.New(*server, limOpts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "godriver:", err)
		os.Exit(2)
	}
	d := &driver{leases: lc, limits: lim, res: map[string]*client.Resource{},
		limiters: map[string]*client.RateLimiter{}, holds: map[int64]*limits.Hold{}}
	os.Exit(d.serve(os.Stdin, os.Stdout))
}

// serve answers the commands on in, one line each, until "close" or the
// end of in; it returns the exit code.
func (d *driver) serve(in io.Reader, out io.Writer) int {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	enc := json.NewEncoder(out)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var cmd command
		var answer any
		if err := json.Unmarshal([]byte(line), &cmd); err != nil {
			answer = errorAnswer(fail(connect.CodeInvalidArgument, "not a JSON command: %v", err))
		} else {
			a, err := d.do(cmd)
			if err != nil {
				answer = errorAnswer(err)
			} else {
				answer = a
			}
		}
		if err := enc.Encode(answer); err != nil {
			return 1
		}
		if cmd.Op == "close" {
			return 0
		}
	}
	d.close()
	return 0
}

func errorAnswer(err error) map[string]any {
	var f *failure
	if !errors.As(err, &f) {
		f = &failure{Code: codeOf(err), Message: err.Error()}
	}
	return map[string]any{"error": f}
}

// codeOf is the gRPC code of an error of the Go clients.
func codeOf(err error) string {
	var ce *limits.ClientError
	switch {
	case errors.As(err, &ce):
		return codeName(ce.Code)
	case errors.Is(err, limits.ErrInvalidRequest):
		return codeName(connect.CodeInvalidArgument)
	case errors.Is(err, limits.ErrNotFound):
		return codeName(connect.CodeNotFound)
	case errors.Is(err, limits.ErrFailedPrecondition), errors.Is(err, limits.ErrClosed), errors.Is(err, client.ErrClosed):
		return codeName(connect.CodeFailedPrecondition)
	case errors.Is(err, limits.ErrUnavailable):
		return codeName(connect.CodeUnavailable)
	case errors.Is(err, context.DeadlineExceeded):
		return codeName(connect.CodeDeadlineExceeded)
	}
	if c := connect.CodeOf(err); c != connect.CodeUnknown {
		return codeName(c)
	}
	return "UNKNOWN"
}

// inputError is the error of Client.Resource or Resource.Ask: ErrClosed,
// or else the invalid id or wants they refuse.
func inputError(err error) error {
	if errors.Is(err, client.ErrClosed) {
		return err
	}
	return &failure{Code: codeName(connect.CodeInvalidArgument), Message: err.Error()}
}

type ok struct {
	OK bool `json:"ok"`
}

func (d *driver) resource(id string) (*client.Resource, error) {
	r := d.res[id]
	if r == nil {
		return nil, fail(connect.CodeNotFound, "no resource %q (send resource first)", id)
	}
	return r, nil
}

func (d *driver) do(cmd command) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch cmd.Op {
	case "resource":
		if cmd.Wants == nil {
			return nil, fail(connect.CodeInvalidArgument, "resource: no wants")
		}
		if _, dup := d.res[cmd.ID]; dup {
			return nil, fail(connect.CodeAlreadyExists, "resource %q is leased already (use set_wants)", cmd.ID)
		}
		r, err := d.leases.Resource(cmd.ID, *cmd.Wants)
		if err != nil {
			return nil, inputError(err)
		}
		d.res[cmd.ID] = r
		d.limiters[cmd.ID] = client.NewRateLimiter(r, burstSeconds)
		return ok{true}, nil
	case "set_wants":
		r, err := d.resource(cmd.ID)
		if err != nil {
			return nil, err
		}
		if cmd.Wants == nil {
			return nil, fail(connect.CodeInvalidArgument, "set_wants: no wants")
		}
		if err := r.Ask(*cmd.Wants); err != nil {
			return nil, inputError(err)
		}
		return ok{true}, nil
	case "capacity":
		r, err := d.resource(cmd.ID)
		if err != nil {
			return nil, err
		}
		c := r.Capacity()
		if math.IsInf(c, 1) {
			c = -1 // no limit, as a safe capacity of -1 says
		}
		return map[string]float64{"capacity": c}, nil
	case "run":
		if _, err := d.resource(cmd.ID); err != nil {
			return nil, err
		}
		if !(cmd.Seconds >= 0) || cmd.Seconds > 600 {
			return nil, fail(connect.CodeInvalidArgument, "run: seconds %v outside [0, 600]", cmd.Seconds)
		}
		return map[string]int64{"acquired": run(d.limiters[cmd.ID], cmd.Seconds)}, nil
	case "release":
		r, err := d.resource(cmd.ID)
		if err != nil {
			return nil, err
		}
		delete(d.res, cmd.ID)
		delete(d.limiters, cmd.ID)
		if err := r.Release(ctx); err != nil {
			return nil, err
		}
		return ok{true}, nil
	case "allow":
		g, err := d.limits.Request(ctx, cmd.Resource, cmd.Domain, max(cmd.Tokens, 1), 0, 0)
		var rej *limits.RejectedError
		switch {
		case errors.As(err, &rej):
			return map[string]any{"status": rej.Status.String(), "granted": 0}, nil
		case err != nil:
			return nil, err
		}
		return map[string]any{"status": "OK", "granted": g.Granted}, nil
	case "reserve":
		h, err := d.limits.ReserveCopies(ctx, cmd.Resource, cmd.Domain, cmd.Copies, cmd.Min, 0)
		var over *limits.OverLimitError
		switch {
		case errors.As(err, &over):
			return map[string]any{"granted": 0, "hold": nil}, nil
		case err != nil:
			return nil, err
		}
		d.nextHold++
		d.holds[d.nextHold] = h
		return map[string]any{"granted": h.Copies(), "hold": d.nextHold}, nil
	case "free":
		if cmd.Hold == nil || d.holds[*cmd.Hold] == nil {
			return nil, fail(connect.CodeNotFound, "free: no such hold")
		}
		h := d.holds[*cmd.Hold]
		delete(d.holds, *cmd.Hold)
		if n := h.Copies(); n > 0 {
			if err := h.Release(ctx, n); err != nil {
				return nil, err
			}
		}
		return ok{true}, nil
	case "close":
		if err := d.close(); err != nil {
			return nil, err
		}
		return ok{true}, nil
	}
	return nil, fail(connect.CodeInvalidArgument, "unknown op %q", cmd.Op)
}

// run takes permits one at a time from lim for seconds, waiting as it
// says, and returns how many it took.
func run(lim *client.RateLimiter, seconds float64) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds*float64(time.Second)))
	defer cancel()
	var n int64
	for lim.Wait(ctx) == nil {
		n++
	}
	return n
}

// close closes both clients: the leases are released, the session closed.
func (d *driver) close() error {
	return errors.Join(d.leases.Close(), d.limits.Close())
}
