package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"github.com/chzyer/readline"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/discovery"
)

const shellHelp = `commands:
  get CLIENT RESOURCE WANTS [PRIORITY]   ask for capacity as CLIENT (refreshes the lease it holds)
  release CLIENT RESOURCE                give CLIENT's lease back
  show                                   the leases this shell holds
  master                                 who the master is (Discovery)
  help                                   this text
  quit | exit | Ctrl-D                   leave`

func newShellCmd() *cobra.Command {
	var rf rpcFlags
	cmd := &cobra.Command{
		Use:   "shell --server ADDR",
		Short: "An interactive shell that acts as many clients of a server at once",
		Long: `shell is an interactive shell like Doorman's: each CLIENT name is a client id of
its own, so one shell can play many clients. It follows mastership redirects.
On a terminal it has line editing and history (~/.sluice_history); otherwise it
reads commands from standard input, one per line.

` + shellHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dial, err := rf.dialer()
			if err != nil {
				return err
			}
			sh := &shell{dial: dial, addr: rf.server, out: cmd.OutOrStdout(), leases: map[[2]string]*pb.Lease{}, asked: map[[2]string]time.Time{}}
			in := cmd.InOrStdin()
			if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
				home, _ := os.UserHomeDir()
				rl, err := readline.NewEx(&readline.Config{
					Prompt: "sluice> ", HistoryFile: filepath.Join(home, ".sluice_history"),
					AutoComplete: readline.NewPrefixCompleter(readline.PcItem("get"), readline.PcItem("release"),
						readline.PcItem("show"), readline.PcItem("master"), readline.PcItem("help"), readline.PcItem("quit")),
				})
				if err != nil {
					return err
				}
				defer rl.Close()
				sh.out = rl.Stdout()
				fmt.Fprintf(sh.out, "sluice shell on %s; type help\n", rf.server)
				for {
					line, err := rl.Readline()
					if errors.Is(err, readline.ErrInterrupt) {
						continue
					}
					if err != nil { // io.EOF
						return nil
					}
					if sh.run(cmd.Context(), line) {
						return nil
					}
				}
			}
			sc := bufio.NewScanner(in)
			for sc.Scan() {
				if sh.run(cmd.Context(), sc.Text()) {
					return nil
				}
			}
			return sc.Err()
		},
	}
	rf.add(cmd)
	return cmd
}

// shell is the state of `sluice shell`: the server it talks to and the
// leases it holds per (client, resource).
type shell struct {
	dial   discovery.Dialer
	addr   string
	out    io.Writer
	leases map[[2]string]*pb.Lease
	asked  map[[2]string]time.Time // when each (client, resource) last asked
}

// run executes one command line and reports whether to quit.
func (sh *shell) run(ctx context.Context, line string) (quit bool) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return false
	}
	switch f[0] {
	case "quit", "exit":
		return true
	case "help", "?":
		fmt.Fprintln(sh.out, shellHelp)
	case "get":
		if len(f) < 4 || len(f) > 5 {
			fmt.Fprintln(sh.out, "usage: get CLIENT RESOURCE WANTS [PRIORITY]")
			return false
		}
		wants, err := strconv.ParseFloat(f[3], 64)
		if err != nil {
			fmt.Fprintf(sh.out, "error: WANTS %q is not a number\n", f[3])
			return false
		}
		var prio int64
		if len(f) == 5 {
			if prio, err = strconv.ParseInt(f[4], 10, 64); err != nil {
				fmt.Fprintf(sh.out, "error: PRIORITY %q is not an integer\n", f[4])
				return false
			}
		}
		key := [2]string{f[1], f[2]}
		last, askedBefore := sh.asked[key]
		sh.asked[key] = time.Now()
		rr, addr, err := getCapacity(ctx, sh.dial, sh.addr, f[1], f[2], prio, wants, sh.leases[key])
		sh.addr = addr
		if err != nil {
			fmt.Fprintf(sh.out, "error: %v\n", err)
			return false
		}
		g := rr.GetGets()
		sh.leases[key] = g
		note := ""
		if askedBefore && time.Since(last) < pb.MinRequestInterval {
			note = fmt.Sprintf(" (asked again within %v: the server sends the current lease back, undecided)", pb.MinRequestInterval)
		}
		fmt.Fprintf(sh.out, "%s %s: capacity %v for %d s, refresh in %d s%s\n", f[1], f[2], g.GetCapacity(),
			int64(time.Until(time.Unix(g.GetExpiryTime(), 0)).Round(time.Second).Seconds()), g.GetRefreshInterval(), note)
	case "release":
		if len(f) != 3 {
			fmt.Fprintln(sh.out, "usage: release CLIENT RESOURCE")
			return false
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := sh.dial(sh.addr).ReleaseCapacity(rctx, connect.NewRequest(&pb.ReleaseCapacityRequest{
			ClientId: proto.String(f[1]), ResourceId: []string{f[2]},
		}))
		if err != nil {
			fmt.Fprintf(sh.out, "error: %v\n", err)
			return false
		}
		delete(sh.leases, [2]string{f[1], f[2]})
		delete(sh.asked, [2]string{f[1], f[2]})
		fmt.Fprintf(sh.out, "%s %s: released\n", f[1], f[2])
	case "show":
		keys := make([][2]string, 0, len(sh.leases))
		for k := range sh.leases {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return keys[i][0]+"\x00"+keys[i][1] < keys[j][0]+"\x00"+keys[j][1] })
		tw := tabwriter.NewWriter(sh.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CLIENT\tRESOURCE\tCAPACITY\tEXPIRES IN")
		for _, k := range keys {
			l := sh.leases[k]
			fmt.Fprintf(tw, "%s\t%s\t%v\t%d s\n", k[0], k[1], l.GetCapacity(), int64(time.Until(time.Unix(l.GetExpiryTime(), 0)).Round(time.Second).Seconds()))
		}
		_ = tw.Flush()
	case "master":
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := sh.dial(sh.addr).Discovery(rctx, connect.NewRequest(&pb.DiscoveryRequest{}))
		if err != nil {
			fmt.Fprintf(sh.out, "error: %v\n", err)
			return false
		}
		switch {
		case resp.Msg.GetIsMaster():
			fmt.Fprintf(sh.out, "%s is the master\n", sh.addr)
		case resp.Msg.GetMastership().GetMasterAddress() != "":
			fmt.Fprintf(sh.out, "%s is not the master; the master is %s\n", sh.addr, resp.Msg.GetMastership().GetMasterAddress())
		default:
			fmt.Fprintf(sh.out, "%s is not the master and does not know who is\n", sh.addr)
		}
	default:
		fmt.Fprintf(sh.out, "error: unknown command %q; type help\n", f[0])
	}
	return false
}
