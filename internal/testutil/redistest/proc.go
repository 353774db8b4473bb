package redistest

import (
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// proc is a running redis-server (or redis-server --sentinel) process.
type proc struct {
	cmd  *exec.Cmd
	out  *tail
	done chan struct{} // closed when the process has ended and been waited for
}

// startProc starts args[0] with the rest as arguments, its standard
// error on ours and its standard output (Redis's log) kept, the last
// logTail bytes of it, for the errors of a process that ends too soon.
func startProc(args []string) (*proc, error) {
	p := &proc{cmd: exec.Command(args[0], args[1:]...), out: &tail{}, done: make(chan struct{})}
	p.cmd.Stderr = os.Stderr
	p.cmd.Stdout = p.out
	// A wrapper's children may hold the log pipe open after it is killed.
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill kills the process (SIGKILL) and waits for it.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// why describes how the process ended, with the end of its log.
func (p *proc) why() string {
	return p.cmd.ProcessState.String() + "; its log ends:\n" + p.out.String()
}

// logTail is how much of a process's log a tail keeps, in bytes.
const logTail = 4096

// tail is an io.Writer keeping the last logTail bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > logTail {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-logTail:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// killAll kills procs (SIGKILL) at once, then waits for every one: a
// group stops in one wait, not one after another.
func killAll(procs []*proc) {
	for _, p := range procs {
		_ = p.cmd.Process.Kill()
	}
	for _, p := range procs {
		<-p.done
	}
}

// removeDir removes *dir and everything in it, if set, and clears it.
func removeDir(dir *string) {
	if *dir != "" {
		_ = os.RemoveAll(*dir)
		*dir = ""
	}
}
