// Package scrape reads a server's Prometheus metrics the way a scraper
// does, for the tools that report a server's own figures (sluice bench,
// the fault harness's soak).
package scrape

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Values fetches base+"/metrics" once and returns the first sample of each
// of names that the page has (a gauge's or a counter's value); names it
// lacks are absent from the map. An error when the page cannot be read or
// parsed.
func Values(ctx context.Context, hc *http.Client, base string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", base, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s/metrics: %w", base, err)
	}
	out := make(map[string]float64, len(names))
	for _, name := range names {
		f := families[name]
		if f == nil || len(f.GetMetric()) == 0 {
			continue
		}
		m := f.GetMetric()[0]
		if m.GetGauge() != nil {
			out[name] = m.GetGauge().GetValue()
		} else {
			out[name] = m.GetCounter().GetValue()
		}
	}
	return out, nil
}
