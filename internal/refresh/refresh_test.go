package refresh

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
)

func TestFollow(t *testing.T) {
	boom := errors.New("boom")
	// masters says, per address, whom that server names as master ("" with
	// ok: it is the master; absent: the call fails).
	cases := []struct {
		name     string
		masters  map[string]string
		wantAddr string
		wantErr  string
		calls    int
	}{
		{"the first is the master", map[string]string{"a": "a"}, "a", "", 1},
		{"one redirect", map[string]string{"a": "b", "b": "b"}, "b", "", 2},
		{"three redirects", map[string]string{"a": "b", "b": "c", "c": "d", "d": "d"}, "d", "", 4},
		{"four redirects is a loop", map[string]string{"a": "b", "b": "c", "c": "d", "d": "e", "e": "e"}, "d", `GetCapacity to d: not the master (master "e")`, 4},
		{"master unknown", map[string]string{"a": ""}, "a", `GetCapacity to a: not the master (master "")`, 1},
		{"names itself", map[string]string{"a": "b", "b": "-b"}, "b", `GetCapacity to b: not the master (master "b")`, 2},
		{"redirected to a dead server", map[string]string{"a": "b"}, "b", "GetCapacity to b: boom", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			resp, addr, err := Follow(t.Context(), "GetCapacity", "a", func(_ context.Context, addr string) (string, *pb.Mastership, error) {
				calls++
				m, ok := tc.masters[addr]
				switch {
				case !ok:
					return "", nil, boom
				case m == addr:
					return "answer from " + addr, nil, nil
				case strings.HasPrefix(m, "-"): // a non-master naming itself
					return "", &pb.Mastership{MasterAddress: proto.String(m[1:])}, nil
				case m == "":
					return "", &pb.Mastership{}, nil
				}
				return "", &pb.Mastership{MasterAddress: proto.String(m)}, nil
			})
			if addr != tc.wantAddr || calls != tc.calls {
				t.Errorf("answered by %q after %d calls, want %q after %d", addr, calls, tc.wantAddr, tc.calls)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr == "" && resp != "answer from "+addr:
				t.Errorf("answer %q", resp)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Errorf("error %v, want %q", err, tc.wantErr)
			case tc.wantErr != "" && resp != "":
				t.Errorf("answer %q with an error", resp)
			}
			if tc.name == "redirected to a dead server" && !errors.Is(err, boom) {
				t.Errorf("error %v does not wrap the call's", err)
			}
		})
	}
}

func TestRetry(t *testing.T) {
	r := Retry{Min: 100 * time.Millisecond, Max: 10 * time.Second, Rand: rand.New(rand.NewPCG(1, 2))}
	// Before any answer the backoff grows to Max.
	var last time.Duration
	for i := range 12 {
		last = r.Failed()
		if last > r.Max || last < r.Min/2 {
			t.Fatalf("failure %d: backoff %v outside [%v/2, %v]", i+1, last, r.Min, r.Max)
		}
	}
	if last < r.Max/2 {
		t.Errorf("after 12 failures the backoff is %v, want at least %v", last, r.Max/2)
	}
	if r.Failures() != 12 {
		t.Errorf("Failures() = %d, want 12", r.Failures())
	}
	// An answer resets the count and caps later backoffs at its interval.
	r.Succeeded(2 * time.Second)
	if r.Failures() != 0 {
		t.Errorf("Failures() after success = %d", r.Failures())
	}
	for range 12 {
		if d := r.Failed(); d > 2*time.Second {
			t.Fatalf("backoff %v beyond the last refresh interval 2s", d)
		}
	}
	// The interval cap is itself bounded to [Min, Max].
	r.Succeeded(time.Hour)
	for range 12 {
		if d := r.Failed(); d > r.Max {
			t.Fatalf("backoff %v beyond Max", d)
		}
	}
	r.Succeeded(0)
	if d := r.Failed(); d > r.Min {
		t.Errorf("backoff %v beyond an interval below Min (capped to Min %v)", d, r.Min)
	}
}

// Run steps at once, then when the step said or when poked, and stops with
// its context; on virtual time (synctest).
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		w := NewWake()
		var at []time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			Run(ctx, w, func(context.Context) time.Duration {
				at = append(at, time.Since(start))
				return 10 * time.Second
			})
		}()
		time.Sleep(25 * time.Second) // steps at 0, 10 s, 20 s
		w.Poke()
		synctest.Wait()
		time.Sleep(11 * time.Second) // the poke's step restarted the timer: next at 35 s, not 30 s
		cancel()
		<-done
		want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 25 * time.Second, 35 * time.Second}
		if len(at) != len(want) {
			t.Fatalf("steps at %v, want %v", at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Fatalf("steps at %v, want %v", at, want)
			}
		}
	})
}

func TestPokesMerge(t *testing.T) {
	w := NewWake()
	w.Poke()
	w.Poke() // never blocks: merges with the pending one
	if len(w) != 1 {
		t.Fatalf("%d pokes pending, want 1", len(w))
	}
}

// TestEvery: the first step comes one interval after the call, then one
// every interval, until the context ends; on virtual time (synctest).
func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		var at []time.Duration
		done := make(chan struct{})
		go func() {
			defer close(done)
			Every(ctx, time.Second, func(context.Context) { at = append(at, time.Since(start)) })
		}()
		time.Sleep(3500 * time.Millisecond)
		cancel()
		<-done
		if len(at) != 3 || at[0] != time.Second || at[1] != 2*time.Second || at[2] != 3*time.Second {
			t.Fatalf("steps at %v, want 1s 2s 3s", at)
		}
	})
}
