// Package chaos is Sluice's fault harness: it runs real `sluice server`
// processes over a real redis-server, Redis Cluster (plain, or with TLS
// and a password), Redis Sentinel group and etcd, drives load through one
// of Sluice's APIs, injects a named fault with real tools (toxiproxy
// between the servers and their stores and between a Doorman tree's
// intermediates and their root, signals to processes, Redis Cluster and
// Sentinel failovers, servers' clocks stepped through a test hook),
// records every request and answer with its timestamps, and checks the
// history against the model the way Jepsen checks one: a token bucket
// never grants more than size + rate × T over any window T, copies never
// exceed their limit, every hold is released exactly once, Σ leases never
// exceed the capacity, and no intermediate's lease outlives its own.
//
// cmd/sluice-chaos runs one mode under one fault and prints the figures;
// docs/accuracy.md is the table they make.
package chaos
