package sim

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// series builds a one-level series from (wants, has) pairs, one per second.
func series(capacity, learningEnd float64, pts [][2]float64, mishaps ...float64) *Series {
	s := &Series{Scenario: "t", Capacity: capacity, LearningEnd: learningEnd, Levels: []string{"clients", "root"}}
	for i, p := range pts {
		s.Samples = append(s.Samples, Sample{T: float64(i), Uses: p[1], Levels: []Level{
			{Wants: p[0], Has: p[1], Capacity: capacity, Leases: 1},
			{Wants: p[0], Has: p[1], Capacity: capacity, Leases: 1},
		}})
	}
	for _, m := range mishaps {
		s.Mishaps = append(s.Mishaps, Mishap{T: m, What: "m"})
	}
	return s
}

func TestSummarizeUtilizationAndShortfall(t *testing.T) {
	s := series(100, 2, [][2]float64{
		{200, 0},   // learning: not counted
		{200, 0},   // learning
		{200, 100}, // 1
		{50, 25},   // 0.5 (demand below capacity)
		{0, 0},     // nothing to hand out: skipped
		{200, 110}, // 1.1, overshoot 10 %
		{200, 120}, // 1.2, overshoot 20 %
		{200, 100}, // 1
		{200, 105}, // 1.05, overshoot 5 %: second episode
	})
	sum := Summarize(s)
	if want := (1 + 0.5 + 1.1 + 1.2 + 1 + 1.05) / 6; !near(sum.UtilizationMean, want) {
		t.Errorf("utilization %v, want %v", sum.UtilizationMean, want)
	}
	if sum.ShortfallEpisodes != 2 || sum.ShortfallSeconds != 3 {
		t.Errorf("episodes %d, seconds %v; want 2, 3", sum.ShortfallEpisodes, sum.ShortfallSeconds)
	}
	if !near(sum.OvershootMaxPercent, 20) || !near(sum.OvershootMeanPercent, 35.0/3) {
		t.Errorf("overshoot max %v mean %v", sum.OvershootMaxPercent, sum.OvershootMeanPercent)
	}
	if sum.DurationSeconds != 8 {
		t.Errorf("duration %v", sum.DurationSeconds)
	}
}

func TestSummarizeReconvergence(t *testing.T) {
	pts := make([][2]float64, 40)
	for i := range pts {
		pts[i] = [2]float64{200, 100}
	}
	// Mishap at 5: out of the band at 6-9, back from 10 on: 5 s.
	for i := 6; i <= 9; i++ {
		pts[i][1] = 50
	}
	// Mishap at 20: never leaves the band: 0 s.
	// Mishap at 30: out from 33 to the end (39): until the end, 9 s.
	for i := 33; i < 40; i++ {
		pts[i][1] = 90
	}
	sum := Summarize(series(100, 0, pts, 5, 20, 30))
	if sum.ReconvergeMaxSeconds != 9 || !near(sum.ReconvergeMeanSeconds, (5+0+9)/3.0) {
		t.Errorf("reconverge max %v mean %v, want 9 and %v", sum.ReconvergeMaxSeconds, sum.ReconvergeMeanSeconds, 14/3.0)
	}
	// Back, but for fewer than 5 samples before the next mishap: counts to it.
	pts = make([][2]float64, 20)
	for i := range pts {
		pts[i] = [2]float64{200, 100}
	}
	pts[7][1] = 0
	sum = Summarize(series(100, 0, pts, 5, 10))
	if sum.ReconvergeMaxSeconds != 5 {
		t.Errorf("reconverge max %v, want 5 (to the next mishap)", sum.ReconvergeMaxSeconds)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestWriteCSVAndJSON(t *testing.T) {
	s := series(100, 0, [][2]float64{{200, 100}, {150, 99.5}})
	var buf bytes.Buffer
	if err := WriteCSV(&buf, s); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if lines[0] != "t,clients_wants,clients_has,clients_capacity,clients_leases,root_wants,root_has,root_capacity,root_leases" {
		t.Errorf("header %q", lines[0])
	}
	if lines[2] != "1,150,99.5,100,1,150,99.5,100,1" {
		t.Errorf("row %q", lines[2])
	}
	buf.Reset()
	if err := WriteJSON(&buf, []Summary{Summarize(s)}); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"utilization_mean", "overshoot_max_percent", "overshoot_mean_percent", "shortfall_episodes", "reconverge_max_seconds"} {
		if _, ok := got[0][k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, buf.String())
		}
	}
	buf.Reset()
	if err := WriteTable(&buf, []Summary{{Scenario: "seven", UtilizationMean: 0.9887}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "seven") || !strings.Contains(buf.String(), "98.87 %") {
		t.Errorf("table:\n%s", buf.String())
	}
}
