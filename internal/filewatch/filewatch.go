// Package filewatch keeps a configuration loaded from a file, or a
// directory of YAML files, and reloads it when it changes (Watcher): the
// file watching of `sluice server --config FILE`, `--quotaservice-config`
// and `--envoy-ratelimit-config`, generic over what the file parses to.
package filewatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Hashed is what a Watcher holds: a configuration with a digest of
// its content (equal digests: nothing changed).
type Hashed interface{ Hash() string }

// Watcher keeps a configuration loaded from a file, or a directory of
// YAML files, and reloads it when one changes (fsnotify on the file's
// directory, or the directory itself, so editors' rename-and-replace and
// Kubernetes ConfigMap symlink swaps are seen) or when Reload is called
// (on SIGHUP, say). A bad new file is reported to onError and the last
// good configuration keeps serving. It is safe for concurrent use.
type Watcher[T Hashed] struct {
	path    string
	load    func(path string) (T, error)
	onLoad  func(T)
	onError func(error)

	mu      sync.Mutex
	current T
}

// Debounce is how long the watcher waits after a file event before it
// reloads, so a burst of events (write, chmod, rename) causes one reload.
const Debounce = 100 * time.Millisecond

// New loads path (a file, or a directory of YAML files) with load once
// and returns a watcher holding what it read; it returns the load error
// if that first load fails. onLoad is called after every later successful
// reload that changed the content (another Hash), onError after every
// failed one; either may be nil.
func New[T Hashed](path string, load func(path string) (T, error), onLoad func(T), onError func(error)) (*Watcher[T], error) {
	r, err := load(path)
	if err != nil {
		return nil, err
	}
	if onLoad == nil {
		onLoad = func(T) {}
	}
	if onError == nil {
		onError = func(error) {}
	}
	return &Watcher[T]{path: path, load: load, onLoad: onLoad, onError: onError, current: r}, nil
}

// Current returns the last good configuration.
func (w *Watcher[T]) Current() T {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// Reload reads the file now. On success with new content it installs the
// new configuration and calls onLoad; on failure it calls onError, keeps the
// last good configuration and returns the error.
func (w *Watcher[T]) Reload() error {
	r, err := w.load(w.path)
	if err != nil {
		w.onError(err)
		return err
	}
	w.mu.Lock()
	changed := r.Hash() != w.current.Hash()
	if changed {
		w.current = r
	}
	w.mu.Unlock()
	if changed {
		w.onLoad(r)
	}
	return nil
}

// Run watches the file until ctx is done. It returns an error only if the
// watch cannot be set up.
func (w *Watcher[T]) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config: watching %s: %w", w.path, err)
	}
	defer fw.Close()
	dir, base := filepath.Dir(w.path), filepath.Base(w.path)
	if st, err := os.Stat(w.path); err == nil && st.IsDir() {
		dir, base = w.path, "" // any YAML file in it
	}
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("config: watching %s: %w", dir, err)
	}
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			// The file itself, or (ConfigMaps) the ..data symlink swap.
			if !watched(filepath.Base(ev.Name), base) {
				continue
			}
			if timer == nil {
				timer = time.NewTimer(Debounce)
			} else {
				timer.Reset(Debounce)
			}
			fire = timer.C
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			w.onError(fmt.Errorf("config: watching %s: %w", w.path, err))
		case <-fire:
			fire = nil
			_ = w.Reload()
		}
	}
}

// watched reports whether an event on the file name concerns a watcher
// of base (a directory's watcher: base ""): the file itself, a YAML file
// of the directory, or (ConfigMaps) the ..data symlink swap.
func watched(name, base string) bool {
	switch ext := filepath.Ext(name); {
	case name == "..data":
		return true
	case base == "":
		return ext == ".yaml" || ext == ".yml"
	}
	return name == base
}
