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
