package main

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/sluice-rl/sluice/sim"
)

// newProgress returns a progress bar drawn on w when w is a terminal, and
// a Progress that does nothing otherwise (pipes, files, CI logs). The bar
// appears only once a run has taken more than a second, and redraws at
// most every 100 ms of wall time.
func newProgress(w io.Writer, label string) sim.Progress {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return noProgress{}
	}
	return &bar{label: label, w: f}
}

type noProgress struct{}

func (noProgress) Update(float64, float64) {}
func (noProgress) Done()                   {}

type bar struct {
	label string
	w     io.Writer
	b     *progressbar.ProgressBar
	start time.Time
	last  time.Time
}

func (b *bar) Update(done, total float64) {
	if b.b == nil {
		if b.start.IsZero() {
			b.start = time.Now()
		}
		if time.Since(b.start) < time.Second {
			return
		}
		b.b = progressbar.NewOptions64(int64(total),
			progressbar.OptionSetWriter(b.w),
			progressbar.OptionSetDescription(b.label),
			progressbar.OptionSetItsString("virtual s"),
			progressbar.OptionShowIts(),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	// The library throttles drawing; skip even the call most of the time.
	if now := time.Now(); now.Sub(b.last) >= 20*time.Millisecond || done >= total {
		b.last = now
		_ = b.b.Set64(int64(done))
	}
}

func (b *bar) Done() {
	if b.b != nil {
		_ = b.b.Finish()
	}
}
