package main

import (
	"fmt"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/sluice-rl/sluice/demo"
	"github.com/sluice-rl/sluice/sim"
)

// maxPlotPoints bounds the points per line; longer series are thinned.
const maxPlotPoints = 4000

// plotSeries draws a simulation's series like doorman-design.md's figures: the clients' Σ
// wants and Σ has, the root's capacity, and every server level's Σ
// capacity over time, with a mark at each mishap; 10×5 inches, written as
// PNG to pngPath and as SVG to svgPath (either may be "" to skip it).
func plotSeries(s *sim.Series, pngPath, svgPath string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Scenario %s (seed %d)", s.Scenario, s.Seed)
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "capacity (permits/s)"
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())

	step := max(1, len(s.Samples)/maxPlotPoints)
	line := func(name string, c color.Color, dashed bool, y func(sim.Sample) float64) error {
		var pts plotter.XYs
		for i := 0; i < len(s.Samples); i += step {
			pts = append(pts, plotter.XY{X: s.Samples[i].T, Y: y(s.Samples[i])})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = c
		l.Width = vg.Points(1.2)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	if err := line("clients Σ wants", color.RGBA{R: 230, G: 140, B: 0, A: 255}, false, func(x sim.Sample) float64 { return x.Levels[0].Wants }); err != nil {
		return err
	}
	if err := line("clients Σ has", color.RGBA{B: 220, A: 255}, false, func(x sim.Sample) float64 { return x.Levels[0].Has }); err != nil {
		return err
	}
	if err := line("capacity", color.RGBA{R: 220, A: 255}, false, func(sim.Sample) float64 { return s.Capacity }); err != nil {
		return err
	}
	greys := []color.Color{color.RGBA{G: 150, A: 255}, color.RGBA{R: 120, G: 60, B: 160, A: 255}, color.RGBA{G: 120, B: 120, A: 255}, color.Gray{Y: 100}}
	for i := 1; i < len(s.Levels); i++ {
		i := i
		if err := line(s.Levels[i]+" Σ capacity", greys[(i-1)%len(greys)], true, func(x sim.Sample) float64 { return x.Levels[i].Capacity }); err != nil {
			return err
		}
	}
	if len(s.Mishaps) > 0 {
		var pts plotter.XYs
		for _, m := range s.Mishaps {
			pts = append(pts, plotter.XY{X: m.T, Y: 0})
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Shape = draw.TriangleGlyph{}
		sc.GlyphStyle.Color = color.Black
		sc.GlyphStyle.Radius = vg.Points(3)
		p.Add(sc)
		p.Legend.Add("mishap", sc)
	}
	// Head room above the highest line for the legend.
	top := s.Capacity
	for _, smp := range s.Samples {
		top = math.Max(top, math.Max(smp.Levels[0].Wants, smp.Levels[0].Has))
	}
	p.Y.Min, p.Y.Max = 0, 1.4*top
	for _, path := range []string{pngPath, svgPath} {
		if path == "" {
			continue
		}
		if err := p.Save(10*vg.Inch, 5*vg.Inch, path); err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
	}
	return nil
}

// plotQuota draws the quota demo's calls per second that reached the
// target, per bucket, against each bucket's configured rate (dashed);
// 10×5 inches, PNG.
func plotQuota(s *demo.QuotaSummary, pngPath string) error {
	p := plot.New()
	p.Title.Text = "sluice demo quota: calls granted per second against each bucket's rate"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "calls per second"
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	colors := []color.Color{color.RGBA{B: 220, A: 255}, color.RGBA{R: 230, G: 140, A: 255}}
	top := 0.0
	for i, b := range s.Buckets {
		if len(b.PerSecond) == 0 {
			continue
		}
		c := colors[i%len(colors)]
		var got, rate plotter.XYs
		for sec, n := range b.PerSecond {
			got = append(got, plotter.XY{X: float64(sec) + 0.5, Y: float64(n)})
			rate = append(rate, plotter.XY{X: float64(sec) + 0.5, Y: b.FillRate})
			top = math.Max(top, float64(n))
		}
		top = math.Max(top, b.FillRate)
		l, err := plotter.NewLine(got)
		if err != nil {
			return err
		}
		l.Color, l.Width = c, vg.Points(1.5)
		r, err := plotter.NewLine(rate)
		if err != nil {
			return err
		}
		r.Color, r.Width, r.Dashes = c, vg.Points(1), []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l, r)
		p.Legend.Add(fmt.Sprintf("%s (%s client) granted", b.Name, b.Client), l)
		p.Legend.Add(fmt.Sprintf("%s fill rate %.0f/s", b.Name, b.FillRate), r)
	}
	p.Y.Min, p.Y.Max = 0, 1.4*top
	if err := p.Save(10*vg.Inch, 5*vg.Inch, pngPath); err != nil {
		return fmt.Errorf("plot %s: %w", pngPath, err)
	}
	return nil
}

// plotTiers draws the tiers demo: above, each calling tenant's calls
// granted per second; below, its burst tier and the sandboxes the holders
// held; 10×7 inches, PNG.
func plotTiers(s *demo.TiersSummary, pngPath string) error {
	rate, tier := plot.New(), plot.New()
	rate.Title.Text = "sluice demo tiers: calls granted per second"
	rate.Y.Label.Text = "calls per second"
	tier.Title.Text = "burst tier (callers) and sandboxes held (holders)"
	tier.X.Label.Text = "time (s)"
	tier.Y.Label.Text = "tier / sandboxes"
	for _, p := range []*plot.Plot{rate, tier} {
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
	}
	colors := []color.Color{color.RGBA{G: 150, A: 255}, color.RGBA{R: 230, G: 140, A: 255}, color.RGBA{R: 200, A: 255},
		color.RGBA{B: 220, A: 255}, color.RGBA{R: 120, G: 60, B: 160, A: 255}}
	top := 0.0
	for i, t := range s.Tenants {
		c := colors[i%len(colors)]
		add := func(p *plot.Plot, ys []float64, label string) error {
			var pts plotter.XYs
			for sec, y := range ys {
				pts = append(pts, plotter.XY{X: float64(sec) + 0.5, Y: y})
			}
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color, l.Width = c, vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(label, l)
			return nil
		}
		var err error
		if len(t.Holds) > 0 {
			ys := make([]float64, len(t.Holds))
			for k, h := range t.Holds {
				ys[k] = float64(h)
			}
			err = add(tier, ys, t.Name+" sandboxes")
		} else {
			g, tr := make([]float64, len(t.Granted)), make([]float64, len(t.Tier))
			for k := range t.Granted {
				g[k], tr[k] = float64(t.Granted[k]), float64(t.Tier[k])
				top = math.Max(top, g[k])
			}
			if err = add(rate, g, t.Name); err == nil {
				err = add(tier, tr, t.Name+" tier")
			}
		}
		if err != nil {
			return err
		}
	}
	rate.Y.Min, rate.Y.Max = 0, 1.4*top
	tier.Y.Min, tier.Y.Max = 0, 4.5
	img := vgimg.New(10*vg.Inch, 7*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(10)}
	plots := [][]*plot.Plot{{rate}, {tier}}
	canvases := plot.Align(plots, tiles, dc)
	rate.Draw(canvases[0][0])
	tier.Draw(canvases[1][0])
	f, err := os.Create(pngPath)
	if err != nil {
		return fmt.Errorf("plot %s: %w", pngPath, err)
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return fmt.Errorf("plot %s: %w", pngPath, err)
	}
	return f.Close()
}
