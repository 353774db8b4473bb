package resources

import "github.com/sluice-rl/sluice/internal/filewatch"

// Watcher keeps a Repository loaded from a file and reloads it when the
// file changes: a filewatch.Watcher of Repositories.
type Watcher = filewatch.Watcher[*Repository]

// NewWatcher loads the file at path once and returns a watcher holding it;
// it returns the load error if that first load fails. onLoad is called
// after every later successful reload that changed the file's content,
// onError after every failed one; either may be nil.
func NewWatcher(path string, onLoad func(*Repository), onError func(error)) (*Watcher, error) {
	return NewWatcherFunc(path, Load, onLoad, onError)
}

// NewWatcherFunc is NewWatcher for a file read by load instead of Load:
// LoadQuotaService, say.
func NewWatcherFunc(path string, load func(path string) (*Repository, error), onLoad func(*Repository), onError func(error)) (*Watcher, error) {
	return filewatch.New(path, load, onLoad, onError)
}
