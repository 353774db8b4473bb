package chaos

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
)

// Server is one `sluice server` child process on a fixed loopback port,
// so that a restart comes back where its clients look for it.
type Server struct {
	Name string
	// Addr is its host:port on 127.0.0.1.
	Addr string
	args []string
	env  []string // added to the harness's environment
	bin  string
	cmd  *exec.Cmd
	done chan struct{}
	logw io.Writer
}

// startServer starts `bin server args… --listen 127.0.0.1:PORT` and waits,
// up to 60 s, until /readyz answers 200.
func startServer(bin, name string, logw io.Writer, args ...string) (*Server, error) {
	return startServerEnv(bin, name, logw, nil, args...)
}

// startServerEnv is startServer with env (KEY=value) added to the
// process's environment.
func startServerEnv(bin, name string, logw io.Writer, env []string, args ...string) (*Server, error) {
	port, err := testutil.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Name: name, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), bin: bin, logw: logw, env: env,
		args: append([]string{"server", "--listen", "127.0.0.1:" + strconv.Itoa(port), "--log-level", "warn"}, args...)}
	return s, s.start()
}

func (s *Server) start() error {
	s.cmd = exec.Command(s.bin, s.args...)
	if len(s.env) > 0 {
		s.cmd.Env = append(os.Environ(), s.env...)
	}
	s.cmd.Stdout = io.Discard
	s.cmd.Stderr = prefixed(s.logw, s.Name+": ")
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(s.cmd, s.done)
	return s.waitReady(60 * time.Second)
}

// waitReady waits until /readyz answers 200.
func (s *Server) waitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	c := http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.done:
			return fmt.Errorf("%s exited before it was ready", s.Name)
		default:
		}
		if r, err := c.Get("http://" + s.Addr + "/readyz"); err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %v", s.Name, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Signal sends sig to the process.
func (s *Server) Signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// Kill kills the process (SIGKILL) and waits for it.
func (s *Server) Kill() {
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Restart starts the process again, with the same arguments and port.
func (s *Server) Restart() error { return s.start() }

// skewFile returns the path of the file through which the process reads
// its clock's skew (hooks.ClockSkewEnv) in dir.
func skewFile(dir string, server int) string {
	return filepath.Join(dir, "clock-skew-"+strconv.Itoa(server))
}

// setSkew sets the skew of the clock of a server started with file as its
// hooks.ClockSkewEnv: the server reads it within hooks.ClockSkewPoll. The
// file is replaced whole (a rename), never read half written.
func setSkew(file string, d time.Duration) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(d.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// prefixed writes each line to w with prefix.
func prefixed(w io.Writer, prefix string) io.Writer {
	if w == nil {
		return io.Discard
	}
	pr, pw := io.Pipe()
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(w, prefix+sc.Text())
		}
	}()
	return pw
}

// Proxies are the toxiproxy proxies between the servers and a store (one
// per server and store member), so that a fault can reach every server or
// cut one off.
type Proxies struct {
	api     *toxiproxy.ApiServer
	proxies []*toxiproxy.Proxy
	// server[k] is the server proxy k serves.
	server []int
}

func newProxies() *Proxies {
	logger := zerolog.Nop()
	return &Proxies{api: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), logger)}
}

// add starts a proxy for server to upstream on a free loopback port and
// returns its address.
func (p *Proxies) add(server int, name, upstream string) (string, error) {
	px := toxiproxy.NewProxy(p.api, name, "127.0.0.1:0", upstream)
	if err := px.Start(); err != nil {
		return "", err
	}
	p.proxies = append(p.proxies, px)
	p.server = append(p.server, server)
	return px.Listen, nil
}

// toxic adds a toxic (toxiproxy's JSON: type, stream, attributes) to the
// proxies of the servers i (every proxy when i is empty).
func (p *Proxies) toxic(spec string, i ...int) error {
	for k, px := range p.proxies {
		if len(i) > 0 && !slices.Contains(i, p.server[k]) {
			continue
		}
		if _, err := px.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
			return fmt.Errorf("toxic %s on %s: %w", spec, px.Name, err)
		}
	}
	return nil
}

// heal removes every toxic and restarts stopped proxies.
func (p *Proxies) heal() error {
	var errs []error
	for _, px := range p.proxies {
		px.Toxics.ResetToxics(context.Background())
		if !px.Enabled {
			// Restart on the address it had (Start would take a new
			// one if Listen were still ":0").
			errs = append(errs, px.Start())
		}
	}
	return errors.Join(errs...)
}

// cut stops the proxies of the servers i: their connections close and new
// ones are refused until heal.
func (p *Proxies) cut(i ...int) {
	for k, px := range p.proxies {
		if slices.Contains(i, p.server[k]) {
			px.Stop()
		}
	}
}

func (p *Proxies) stop() {
	for _, px := range p.proxies {
		px.Stop()
	}
}

// Env is what a run needs: the stores, the proxies in front of them, and
// the servers.
type Env struct {
	Dir     string
	Redis   *redistest.Server
	Cluster *redistest.Cluster
	// Sentinel: a master and a replica watched by three sentinels.
	Sentinel *redistest.Sentinel
	// Sec is how the store is secured (the harness's own clients log in
	// and speak TLS as it says); Prefix the servers' --redis-key-prefix
	// ("": redisstore.DefaultPrefix).
	Sec    redistest.Security
	Prefix string
	// Etcd: one member, or three for a fault on its members.
	Etcd *etcdtest.Cluster
	// RedisProxies and EtcdProxies sit between each server and each member
	// of the store (none for a Redis Cluster, whose nodes advertise their
	// own addresses).
	RedisProxies, EtcdProxies *Proxies
	// ParentProxies sit between each intermediate of a Doorman tree
	// (Mode.Tree; servers 1 on) and its parent, the root (server 0).
	ParentProxies *Proxies
	Servers       []*Server
}

// Close stops everything and removes the env's directory.
func (e *Env) Close() {
	for _, s := range e.Servers {
		if s.cmd != nil && s.cmd.Process != nil {
			s.Kill()
		}
	}
	for _, p := range []*Proxies{e.RedisProxies, e.EtcdProxies, e.ParentProxies} {
		if p != nil {
			p.stop()
		}
	}
	if e.Redis != nil {
		e.Redis.Resume()
		e.Redis.Stop()
	}
	if e.Cluster != nil {
		e.Cluster.Stop()
	}
	if e.Sentinel != nil {
		e.Sentinel.Stop()
	}
	if e.Etcd != nil {
		e.Etcd.Stop()
	}
	if e.Dir != "" {
		_ = os.RemoveAll(e.Dir) // configs, certificates, the password, etcd's and Redis's data
	}
}

// writeFile writes a file in the env's directory and returns its path.
func (e *Env) writeFile(name, content string) (string, error) {
	p := filepath.Join(e.Dir, name)
	return p, os.WriteFile(p, []byte(content), 0o644)
}

// password makes a random password for the store and writes it into the
// env's directory (the servers' --redis-password-file).
func (e *Env) password() (pw, file string, err error) {
	pw = rand.Text()
	file = filepath.Join(e.Dir, "redis-password")
	return pw, file, os.WriteFile(file, []byte(pw+"\n"), 0o600)
}
