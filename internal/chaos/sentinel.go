package chaos

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// switchWatch follows the two servers of a Sentinel group through a
// fault, from the Redis side: when the replica reports role:master (its
// promotion), when a sentinel announces it (+switch-master), when the
// first script reaches it as master (the first
// decision on the new master), when the old master reports role:slave
// (Sentinel has demoted it: its data is then replaced by the new
// master's), and how many scripts the old master ran after the
// promotion (decisions whose writes the new master never saw) and when
// it ran the last.
type switchWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	// Set by the watch, read once done is closed: offsets from the start
	// of the load (zero: not seen).
	promoted, firstOnNew, demoted time.Duration
	// announced is when a sentinel published the new master
	// (+switch-master), which failover clients follow.
	announced time.Duration
	// oldAnswered: the old master answered after the promotion (a
	// killed one does not); lostScripts then counts the scripts it ran
	// after the promotion, up to its demotion or the end of the run.
	oldAnswered bool
	lostScripts int64
	// lastOnOld is when the last of them was seen.
	lastOnOld time.Duration
}

// switchPoll is how often the watch polls the servers.
const switchPoll = 10 * time.Millisecond

// watchSentinel starts the switch watch on the Sentinel group's master
// now (which it returns) and its replica, until the load ends (r.run
// stops it).
func (r *runner) watchSentinel() (old string, err error) {
	s := r.env.Sentinel
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if old, err = s.MasterAddr(ctx); err != nil {
		return "", err
	}
	i := slices.Index(s.Addrs(), old)
	if i < 0 {
		return "", fmt.Errorf("sentinel: master %s is none of the servers %v", old, s.Addrs())
	}
	replica := s.Addrs()[1-i]
	wctx, stop := context.WithCancel(context.Background())
	w := &switchWatch{cancel: stop, done: make(chan struct{})}
	r.switchWatch = w
	client := func(addr string) (*redis.Client, error) {
		o, err := r.env.Sec.Options(addr)
		if err != nil {
			return nil, err
		}
		o.MaxRetries, o.DialerRetries = -1, 1
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 100*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
		return redis.NewClient(o), nil
	}
	oc, err := client(old)
	if err != nil {
		return "", err
	}
	nc, err := client(replica)
	if err != nil {
		oc.Close()
		return "", err
	}
	tc, err := r.env.Sec.TLSConfig()
	if err != nil {
		oc.Close()
		nc.Close()
		return "", err
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddrs()[0], TLSConfig: tc})
	sub := sc.Subscribe(ctx, "+switch-master")
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		sub.Close()
		sc.Close()
		oc.Close()
		nc.Close()
		return "", fmt.Errorf("sentinel: subscribing to +switch-master: %w", err)
	}
	announced := make(chan time.Duration, 1)
	go func() {
		defer sc.Close()
		defer sub.Close()
		if _, err := sub.ReceiveMessage(wctx); err == nil {
			announced <- r.hist.Since(time.Now())
		}
	}()
	go func() {
		defer close(w.done)
		defer oc.Close()
		defer nc.Close()
		defer func() {
			select {
			case w.announced = <-announced:
			default:
			}
		}()
		base, _ := scriptCalls(wctx, nc) // a replica runs none: scripts replicate as their effects
		var oldAt int64
		every(wctx, switchPoll, func() {
			at := r.hist.Since(time.Now())
			if w.promoted == 0 {
				if role(wctx, nc) == "master" {
					w.promoted = at
					// A plain dial first: go-redis logs every dial it
					// fails, process-wide, and a killed master refuses.
					if conn, err := net.DialTimeout("tcp", old, 100*time.Millisecond); err == nil {
						conn.Close()
						oldAt, w.oldAnswered = scriptCalls(wctx, oc)
					}
				}
				return
			}
			if w.firstOnNew == 0 {
				if n, ok := scriptCalls(wctx, nc); ok && n > base {
					w.firstOnNew = at
				}
			}
			if w.demoted != 0 || !w.oldAnswered {
				return // demoted, or dead at the promotion (killed)
			}
			n, ok := scriptCalls(wctx, oc)
			if !ok {
				return
			}
			if n-oldAt > w.lostScripts {
				w.lostScripts, w.lastOnOld = n-oldAt, at
			}
			if role(wctx, oc) == "slave" {
				w.demoted = at
			}
		})
	}()
	r.logf("sentinel: watching the master %s and the replica %s", old, replica)
	return old, nil
}

// stop ends the watch and waits for it.
func (w *switchWatch) stop() {
	w.cancel()
	<-w.done
}

// role returns the role line of c's INFO replication ("master",
// "slave"), or "" when it does not answer.
func role(ctx context.Context, c *redis.Client) string {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return ""
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "role:"); ok {
			return v
		}
	}
	return ""
}

// scriptCalls returns how many scripts c's server has run (EVAL,
// EVALSHA and their read-only forms, FCALL: INFO commandstats's calls),
// and whether it answered.
func scriptCalls(ctx context.Context, c *redis.Client) (int64, bool) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, false
	}
	var n int64
	for line := range strings.Lines(info) {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		switch name {
		case "cmdstat_eval", "cmdstat_evalsha", "cmdstat_eval_ro", "cmdstat_evalsha_ro", "cmdstat_fcall", "cmdstat_fcall_ro":
		default:
			continue
		}
		if !ok {
			continue
		}
		for f := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				k, err := strconv.ParseInt(v, 10, 64)
				if err == nil {
					n += k
				}
			}
		}
	}
	return n, true
}
