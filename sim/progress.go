package sim

// Progress is told how far a run is: done and total in virtual seconds.
// Update is called often (once per simulated second) and must be cheap.
// The command draws it as a progress bar; nil draws nothing.
type Progress interface {
	Update(done, total float64)
	Done()
}
