package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-rl/sluice/demo"
	"github.com/sluice-rl/sluice/sim"
)

func TestPlot(t *testing.T) {
	sc, _ := sim.Lookup("five")
	res, err := sim.Run(sc, sim.Options{Seed: 1, Duration: 120})
	if err != nil {
		t.Fatal(err)
	}
	res.Series.Mishaps = append(res.Series.Mishaps, sim.Mishap{T: 60, What: "x"})
	dir := t.TempDir()
	png, svg := filepath.Join(dir, "p.png"), filepath.Join(dir, "p.svg")
	if err := plotSeries(&res.Series, png, svg); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("PNG: %v, %d bytes", err, len(b))
	}
	b, err = os.ReadFile(svg)
	if err != nil || !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("clients")) {
		t.Fatalf("SVG: %v, %d bytes", err, len(b))
	}
}

func TestProgressOffTerminal(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf, "x")
	p.Update(1, 2)
	p.Done()
	if buf.Len() != 0 {
		t.Fatalf("progress drawn on a non-terminal: %q", buf.String())
	}
}

func TestPlotQuota(t *testing.T) {
	sum := &demo.QuotaSummary{DurationSeconds: 3, Buckets: []demo.QuotaBucket{
		{Name: "target/naive", Client: "naive", FillRate: 100, PerSecond: []int64{120, 100, 100}},
		{Name: "logins/<user>", Client: "naive", FillRate: 1},
	}}
	png := filepath.Join(t.TempDir(), "q.png")
	if err := plotQuota(sum, png); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("PNG: %v, %d bytes", err, len(b))
	}
}

func TestPlotTiers(t *testing.T) {
	sum := &demo.TiersSummary{DurationSeconds: 3, Tenants: []demo.Tenant{
		{Name: "alice", Granted: []int64{15, 15, 15}, Tier: []int32{1, 1, 1}},
		{Name: "carol", Holds: []int64{2, 0, 1}},
	}}
	png := filepath.Join(t.TempDir(), "t.png")
	if err := plotTiers(sum, png); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("PNG: %v, %d bytes", err, len(b))
	}
}
