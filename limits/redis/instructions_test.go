package redisstore

import (
	"bufio"
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/limits"
)

// BenchmarkTakeInstructions counts the instructions Redis executes for a
// token-bucket decision, rather than timing it: the count repeats from run
// to run whatever else the machine does, so a change to take.lua can be
// judged by one run on a machine whose speed swings by a third within
// minutes. A redis-server of its own runs under valgrind's callgrind;
// 10 000 buckets are made first; then each of b.N round trips carries
// exactly perScript requests (one script), each on another bucket drawn
// at random (a fixed seed), at caller time advancing 0.8 ms a round trip
// (about quota-bench's rate), with a MaxIdle long enough that no key
// expires meanwhile. It reports redis-instructions/request, the
// instructions of Redis's command processing (reading and running the
// command, writing its reply: callgrind's inclusive counts of
// readQueryFromClient and handleClientsWithPendingWrites) over the
// requests, and redis-total-instructions/request, every instruction of
// the process (its timers too, which run by the wall clock, tens of times
// slower under valgrind). Skipped without valgrind.
//
//	go test -run '^$' -bench TakeInstructions -benchtime 500x ./limits/redis
func BenchmarkTakeInstructions(b *testing.B) {
	skipWithoutCallgrind(b)
	for _, perScript := range []int{12, 15} {
		b.Run("requests="+strconv.Itoa(perScript), func(b *testing.B) { takeInstructions(b, perScript) })
	}
}

func takeInstructions(b *testing.B, perScript int) {
	callgrindInstructions(b, 10000, perScript, "", func(c *redis.Client) func([]int) {
		st := New(c, Options{Prefix: "b:", callerTime: true, Timeout: time.Minute})
		bucket := limits.Bucket{Size: 1e6, FillRate: 1e6, MaxIdle: time.Hour}
		l := &limits.Limit{Resource: "r", Kind: limits.KindTemplate, Algorithm: limits.TokenBucket, Bucket: bucket, Params: bucket.Params(), Gen: 1}
		now := t0.UnixNano()
		return func(domains []int) {
			batch := make([]*call, len(domains))
			for i, d := range domains {
				batch[i] = st.takeCall(now, limits.Key{Resource: "r", Domain: "k" + strconv.Itoa(d)}, l, limits.Ask{Tokens: 1, Min: 1})
			}
			if err := st.single.sendNow(b.Context(), batch); err != nil {
				b.Fatal(err)
			}
			for _, c := range batch {
				if out, err := parseTake(c.res, l.Params); c.err != nil || err != nil || out.Granted != 1 {
					b.Fatalf("%+v %v %v", out, c.err, err)
				}
				putCall(c)
			}
			now += int64(800 * time.Microsecond)
		}
	})
}

// skipWithoutCallgrind skips b unless valgrind and callgrind's tools are
// on the PATH.
func skipWithoutCallgrind(b *testing.B) {
	for _, bin := range []string{"valgrind", "callgrind_control", "callgrind_annotate"} {
		if _, err := exec.LookPath(bin); err != nil {
			b.Skipf("%s not found: %v", bin, err)
		}
	}
}

// callgrindInstructions is the instruction benchmarks' machinery: it
// starts a redis-server of its own under valgrind's callgrind and gives a
// client of it to setup, whose roundTrip sends one script of requests on
// the items it is given (and fails b unless each is answered as
// expected). It makes items 0 to items-1 first, 1000 a round trip; then
// counts the instructions of b.N round trips, each of perScript distinct
// items drawn at random (a fixed seed), and reports
// redis-instructions/request (callgrind's inclusive counts of
// readQueryFromClient and handleClientsWithPendingWrites: reading and
// running the commands, writing their replies) and
// redis-total-instructions/request (the whole process, its timers too).
// Unless annotateOut is empty, callgrind_annotate's output is written to
// annotateOut.<perScript>, to read where the instructions go.
func callgrindInstructions(b *testing.B, items, perScript int, annotateOut string, setup func(c *redis.Client) (roundTrip func(items []int))) {
	dir := b.TempDir()
	srv, err := redistest.StartUnder("valgrind", "-q", "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "callgrind.%p"))
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	defer c.Close()
	roundTrip := setup(c)
	all := make([]int, items)
	for i := range all {
		all[i] = i
	}
	for i := 0; i < items; i += 1000 { // made 1000 a script, quickly
		roundTrip(all[i:min(i+1000, items)])
	}
	pid := strconv.Itoa(srv.PID())
	callgrind := func(arg string) {
		if out, err := exec.Command("callgrind_control", arg, pid).CombinedOutput(); err != nil {
			b.Fatalf("callgrind_control %s: %v: %s", arg, err, out)
		}
	}
	callgrind("-z")
	rng := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for range b.N {
		for i := range perScript { // the front, perScript distinct items
			j := i + rng.IntN(items-i)
			all[i], all[j] = all[j], all[i]
		}
		roundTrip(all[:perScript])
	}
	b.StopTimer()
	callgrind("-d")
	dumps, _ := filepath.Glob(filepath.Join(dir, "callgrind.*"))
	var newest string
	var newestAt time.Time
	for _, f := range dumps {
		if fi, err := os.Stat(f); err == nil && fi.ModTime().After(newestAt) {
			newest, newestAt = f, fi.ModTime()
		}
	}
	out, err := exec.Command("callgrind_annotate", "--inclusive=yes", "--threshold=100", newest).Output()
	if err != nil {
		b.Fatalf("callgrind_annotate %s: %v", newest, err)
	}
	if annotateOut != "" {
		if err := os.WriteFile(annotateOut+"."+strconv.Itoa(perScript), out, 0o644); err != nil {
			b.Error(err)
		}
	}
	var total, commands float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		n, err := strconv.ParseFloat(strings.ReplaceAll(f[0], ",", ""), 64)
		if err != nil {
			continue
		}
		switch {
		case strings.Contains(sc.Text(), "PROGRAM TOTALS"):
			total = n
		case strings.HasSuffix(f[2], ":readQueryFromClient"), strings.HasSuffix(f[2], ":handleClientsWithPendingWrites"):
			commands += n
		}
	}
	if total == 0 || commands == 0 {
		b.Fatalf("callgrind_annotate %s: no totals or no readQueryFromClient in:\n%s", newest, out)
	}
	requests := float64(b.N * perScript)
	b.ReportMetric(commands/requests, "redis-instructions/request")
	b.ReportMetric(total/requests, "redis-total-instructions/request")
}
