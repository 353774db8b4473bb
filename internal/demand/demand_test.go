package demand

import (
	"math"
	"testing"
)

func TestAverage(t *testing.T) {
	tests := []struct {
		name   string
		xs     []float64
		weight float64
		want   float64
	}{
		{"none", nil, 0.5, 0},
		{"first is taken as is", []float64{10}, 0.5, 10},
		{"step", []float64{0, 16, 16, 16, 16}, 0.5, 15},
		{"weight 1 keeps the newest", []float64{3, 7}, 1, 7},
		{"bad weight is the default", []float64{0, 8}, 0, 4},
		{"bad measurements count as 0", []float64{8, math.NaN(), math.Inf(1), -1}, 0.5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a Average
			for _, x := range tt.xs {
				a.Observe(x, tt.weight)
			}
			if got := a.Value(); got != tt.want {
				t.Fatalf("Value() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestObserveCount(t *testing.T) {
	tests := []struct {
		name   string
		counts [][2]float64 // count, seconds
		want   float64
	}{
		{"first is taken as is", [][2]float64{{50, 5}}, 10},
		// 100 expected over 5 s: σ 10, so 120 is noise (smoothed) …
		{"noise is smoothed", [][2]float64{{100, 5}, {120, 5}}, 22},
		// … and 140 a step, followed at once.
		{"a step is followed at once", [][2]float64{{100, 5}, {140, 5}}, 28},
		{"a drop is a step too", [][2]float64{{1000, 5}, {200, 5}}, 40},
		{"idle to a few requests is a step", [][2]float64{{0, 5}, {5, 1}}, 5},
		{"idle to one request is noise", [][2]float64{{0, 5}, {1, 1}}, 0.5},
		{"bad intervals count as none over a second", [][2]float64{{10, 1}, {5, 0}, {math.NaN(), 1}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a Average
			var got float64
			for _, c := range tt.counts {
				got = a.ObserveCount(c[0], c[1], 0.5)
			}
			if got != tt.want || a.Value() != tt.want {
				t.Fatalf("ObserveCount = %v (Value %v), want %v", got, a.Value(), tt.want)
			}
		})
	}
}
