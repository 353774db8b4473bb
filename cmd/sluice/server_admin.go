package main

import (
	"github.com/spf13/pflag"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/server"
)

// adminFlags are sluice server's flags of the admin API (/admin/v1/).
type adminFlags struct{ server.Admin }

func (a *adminFlags) register(f *pflag.FlagSet) {
	f.StringVar(&a.TokenFile, "admin-token-file", "", "admin API (/admin/v1/): bearer tokens for writes, one \"USER TOKEN\" pair per line (# comments); reread when it changes")
	f.StringSliceVar(&a.TrustForwarded, "admin-trust-forwarded-user", nil, "admin API: take the user from X-Forwarded-User for requests from these addresses (CIDRs or IPs, comma-separated): an authenticating proxy")
	f.BoolVar(&a.Insecure, "admin-insecure", false, "admin API: allow writes without credentials from loopback addresses (development only)")
	f.BoolVar(&a.AuthReads, "admin-auth-reads", false, "admin API: reads need the same authentication as writes")
	f.IntVar(&a.Keep, "admin-history", admin.DefaultKeep, "admin API: how many versions of the configuration to keep (in FILE.history/ or KEY/history/)")
}
