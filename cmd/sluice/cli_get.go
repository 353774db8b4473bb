package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	pb "github.com/sluice-rl/sluice/api/doorman"
	"github.com/sluice-rl/sluice/internal/discovery"
	"github.com/sluice-rl/sluice/internal/refresh"
)

func newGetCmd() *cobra.Command {
	var (
		rf       rpcFlags
		resource string
		wants    float64
		clientID string
		priority int64
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "get --server ADDR --resource R --wants W",
		Short: "Ask a server for capacity once (GetCapacity) and print the lease",
		Long: `get sends one GetCapacity for one resource, follows mastership redirects (up
to three), and prints the lease: capacity, expiry, refresh interval and safe
capacity (--json for JSON). For scripts and health checks; the exit code is 1 if
no lease came back.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dial, err := rf.dialer()
			if err != nil {
				return err
			}
			if resource == "" {
				return fmt.Errorf("--resource is required")
			}
			rr, master, err := getCapacity(cmd.Context(), dial, rf.server, clientID, resource, priority, wants, nil)
			if err != nil {
				return err
			}
			g := rr.GetGets()
			exp := time.Unix(g.GetExpiryTime(), 0)
			out := struct {
				Server          string   `json:"server"`
				Resource        string   `json:"resource"`
				Capacity        float64  `json:"capacity"`
				Expiry          string   `json:"expiry"`
				ExpiresIn       float64  `json:"expires_in_seconds"`
				RefreshInterval int64    `json:"refresh_interval_seconds"`
				SafeCapacity    *float64 `json:"safe_capacity"`
			}{master, resource, g.GetCapacity(), exp.UTC().Format(time.RFC3339), time.Until(exp).Round(time.Second).Seconds(), g.GetRefreshInterval(), rr.SafeCapacity}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			safe := "unknown"
			if out.SafeCapacity != nil {
				safe = fmt.Sprint(*out.SafeCapacity)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s from %s: capacity %v until %s (in %v s), refresh every %d s, safe capacity %s\n",
				resource, master, out.Capacity, out.Expiry, out.ExpiresIn, out.RefreshInterval, safe)
			return nil
		},
	}
	rf.add(cmd)
	f := cmd.Flags()
	f.StringVar(&resource, "resource", "", "resource id (required)")
	f.Float64Var(&wants, "wants", 1, "capacity to ask for")
	f.StringVar(&clientID, "client", "sluice-get", "client id")
	f.Int64Var(&priority, "priority", 0, "priority (higher is more important)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// getCapacity sends one GetCapacity for one resource to addr, following
// mastership redirects, and returns the resource's response and the
// address that answered. has, if set, is the lease the client holds.
func getCapacity(ctx context.Context, dial discovery.Dialer, addr, clientID, resource string, priority int64, wants float64, has *pb.Lease) (*pb.ResourceResponse, string, error) {
	req := connect.NewRequest(&pb.GetCapacityRequest{ClientId: proto.String(clientID), Resource: []*pb.ResourceRequest{{
		ResourceId: proto.String(resource), Priority: proto.Int64(priority), Wants: proto.Float64(wants), Has: has,
	}}})
	resp, addr, err := refresh.Follow(ctx, "GetCapacity", addr, func(ctx context.Context, addr string) (*pb.GetCapacityResponse, *pb.Mastership, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := dial(addr).GetCapacity(ctx, req)
		if err != nil {
			return nil, nil, err
		}
		return resp.Msg, resp.Msg.Mastership, nil
	})
	if err != nil {
		return nil, addr, err
	}
	if len(resp.GetResponse()) != 1 {
		return nil, addr, fmt.Errorf("GetCapacity to %s: %d responses for one resource", addr, len(resp.GetResponse()))
	}
	return resp.GetResponse()[0], addr, nil
}
