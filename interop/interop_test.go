package interop

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/testutil"
)

// python is Debian's interpreter: the one that sees python3-grpcio.
const python = "/usr/bin/python3"

// langs are the languages whose drivers the suite drives.
var langs = []string{"go", "python", "java", "cpp"}

// prepares build a language's driver (and library) once, before the tests;
// a missing toolchain fails the suite, saying so.
var prepares = map[string]func() error{"cpp": prepareCpp}

var (
	javaBuild string // the directory of clients/java/build.sh's jars
	root      string // the module's root
	sluice    string // the sluice binary, built once
	tempDir   string
)

func TestMain(m *testing.M) {
	testutil.QuietLogs()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	root = filepath.Dir(wd)
	if out, err := exec.Command(python, "-c", "import grpc, google.protobuf, pytest").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "interop: %s cannot import grpc, google.protobuf and pytest (%v: %s)\n"+
			"run scripts/test: it installs Debian's python3-grpcio, python3-protobuf and python3-pytest\n", python, err, bytes.TrimSpace(out))
		return 1
	}
	// Java: built once here (javac against Debian's jars, cached by a hash
	// of the sources), so the drivers started in parallel find it built.
	var stderr bytes.Buffer
	build := exec.Command(filepath.Join(root, "clients/java/build.sh"))
	build.Stderr = &stderr
	out, err := build.Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "interop: building the Java client: %v\n%s\n"+
			"run scripts/test: it installs Debian's JDK, libgrpc-java, libnetty-java, junit5 and the rest\n", err, stderr.Bytes())
		return 1
	}
	javaBuild = strings.TrimSpace(string(out))
	tempDir, err = os.MkdirTemp("", "sluice-interop")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(tempDir)
	sluice = filepath.Join(tempDir, "sluice")
	godriver := filepath.Join(tempDir, "godriver")
	for bin, pkg := range map[string]string{sluice: "./cmd/sluice", godriver: "./interop/godriver"} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pkg, err, out)
			return 1
		}
	}
	// scripts/interop-driver runs this build instead of building its own.
	os.Setenv("SLUICE_INTEROP_GO_DRIVER", godriver)
	for lang, prepare := range prepares {
		if err := prepare(); err != nil {
			fmt.Fprintf(os.Stderr, "interop: preparing %s: %v\n", lang, err)
			return 1
		}
	}
	return m.Run()
}

// config is the suite's server configuration: a FAIR_SHARE resource per
// test under fair/, 1000-resource bulk/ leases, token buckets and
// copy-limited resources.
const config = `
resources:
  - identifier_glob: "fair/*"
    capacity: 100
    algorithm: {kind: FAIR_SHARE, lease_length: 30, refresh_interval: 5, learning_mode_duration: 0}
  - identifier_glob: "bulk/*"
    capacity: 1000
    safe_capacity: 1
    algorithm: {kind: STATIC, lease_length: 60, refresh_interval: 5, learning_mode_duration: 0}
limits:
  resources:
    api:
      domains:
        exact: {size: 7, fill_rate: 0.0001, wait_timeout: 0s, max_tokens_per_request: 7}
    sandboxes:
      algorithm: copies
      domain_limit: 2
      global_limit: 3
`

// server is a `sluice server` child process on a free loopback port.
type server struct {
	addr string
}

// startServer runs `sluice server --config cfg` with flags, stopped with
// SIGTERM at the end of the test.
func startServer(t *testing.T, cfg string, flags ...string) *server {
	t.Helper()
	addr, _, _ := testutil.StartServer(t, sluice, cfg, flags...)
	return &server{addr: addr}
}

// get reads path from the server's HTTP side.
func (s *server) get(t *testing.T, path string) []byte {
	t.Helper()
	resp, err := http.Get("http://" + s.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v\n%s", path, resp.StatusCode, err, b)
	}
	return b
}

// lease is a row of the server's lease table.
type lease struct {
	Client string  `json:"client"`
	Has    float64 `json:"has"`
	Wants  float64 `json:"wants"`
}

// leases returns the leases the server holds on resource id: none once
// its sweep has dropped the resource, idle (its page is then 404).
func (s *server) leases(t *testing.T, id string) []lease {
	t.Helper()
	resp, err := http.Get("http://" + s.addr + "/debug/status/resource?format=json&id=" + id)
	if err != nil {
		t.Fatalf("the status of %s: %v", id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusNotFound {
		return nil
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the status of %s: %d %v\n%s", id, resp.StatusCode, err, b)
	}
	var page struct {
		Leases []lease `json:"leases"`
	}
	if err := json.Unmarshal(b, &page); err != nil {
		t.Fatal(err)
	}
	return page.Leases
}

var getCapacityRE = regexp.MustCompile(`(?m)^sluice_server_requests_total\{code="ok",method="/doorman.Capacity/GetCapacity"\} (\S+)$`)

// getCapacityRequests returns how many GetCapacity requests the server
// has answered.
func (s *server) getCapacityRequests(t *testing.T) int {
	t.Helper()
	m := getCapacityRE.FindSubmatch(s.get(t, "/metrics"))
	if m == nil {
		return 0
	}
	n, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// driver is one language's interop driver process.
type driver struct {
	t      *testing.T
	lang   string
	id     string
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *testutil.LogBuffer
	mu     sync.Mutex
	exited chan error
}

// answer is a driver's answer to one command.
type answer map[string]any

// startDriver runs scripts/interop-driver lang against s as client id;
// extra flags follow.
func startDriver(t *testing.T, lang string, s *server, id string, flags ...string) *driver {
	t.Helper()
	args := append([]string{lang, "--server", s.addr, "--client-id", id}, flags...)
	cmd := exec.Command(filepath.Join(root, "scripts", "interop-driver"), args...)
	cmd.Dir = root
	d := &driver{t: t, lang: lang, id: id, cmd: cmd, stderr: new(testutil.LogBuffer), exited: make(chan error, 1)}
	cmd.Stderr = d.stderr
	var err error
	if d.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	// Our own pipe, not StdoutPipe: Wait (in its goroutine) must not close
	// the reading end before the last answer is read.
	stdout, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	d.out = bufio.NewReader(stdout)
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatalf("starting the %s driver: %v", lang, err)
	}
	t.Cleanup(func() { stdout.Close() })
	go func() { d.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = d.in.Close()
		select {
		case <-d.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-d.exited
		}
		if t.Failed() && d.stderr.Len() > 0 {
			t.Logf("%s driver %s's stderr:\n%s", lang, id, d.stderr)
		}
	})
	return d
}

// send sends one command and returns its answer, or an error if the
// driver does not answer within a minute. Safe from any goroutine.
func (d *driver) send(cmd map[string]any) (answer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	if _, err := d.in.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("%s %s: writing %s: %w", d.lang, d.id, b, err)
	}
	type result struct {
		line string
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		line, err := d.out.ReadString('\n')
		ch <- result{line, err}
	}()
	var r result
	select {
	case r = <-ch:
	case <-time.After(time.Minute):
		return nil, fmt.Errorf("%s %s: no answer to %s within a minute", d.lang, d.id, b)
	}
	if r.err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer to %s: %w\nstderr:\n%s", d.lang, d.id, b, r.err, d.stderr)
	}
	var a answer
	if err := json.Unmarshal([]byte(r.line), &a); err != nil {
		return nil, fmt.Errorf("%s %s: answer %q to %s is not JSON: %w", d.lang, d.id, r.line, b, err)
	}
	return a, nil
}

// call is send, failing the test (t.Fatalf) when there is no answer.
func (d *driver) call(cmd map[string]any) answer {
	d.t.Helper()
	a, err := d.send(cmd)
	if err != nil {
		d.t.Fatal(err)
	}
	return a
}

// must is call, failing the test on an error answer.
func (d *driver) must(cmd map[string]any) answer {
	d.t.Helper()
	a := d.call(cmd)
	if e, ok := a["error"]; ok {
		d.t.Fatalf("%s %s: %v answered error %v", d.lang, d.id, cmd, e)
	}
	return a
}

// num returns a's numeric field k.
func (d *driver) num(a answer, k string) float64 {
	d.t.Helper()
	v, ok := a[k].(float64)
	if !ok {
		d.t.Fatalf("%s %s: answer %v has no number %q", d.lang, d.id, a, k)
	}
	return v
}

// capacity returns the capacity of resource id.
func (d *driver) capacity(id string) float64 {
	d.t.Helper()
	return d.num(d.must(map[string]any{"op": "capacity", "id": id}), "capacity")
}

// errorCode returns the code of an error answer ("" for none).
func errorCode(a answer) string {
	e, ok := a["error"].(map[string]any)
	if !ok {
		return ""
	}
	c, _ := e["code"].(string)
	return c
}

// close sends close and checks the clean exit: {"ok":true}, then exit 0.
func (d *driver) close() {
	d.t.Helper()
	if a := d.must(map[string]any{"op": "close"}); a["ok"] != true {
		d.t.Fatalf("%s %s: close answered %v", d.lang, d.id, a)
	}
	select {
	case err := <-d.exited:
		d.exited <- err // for the cleanup
		if err != nil {
			d.t.Fatalf("%s %s: exit after close: %v\n%s", d.lang, d.id, err, d.stderr)
		}
	case <-time.After(30 * time.Second):
		d.t.Fatalf("%s %s: still running 30 s after close", d.lang, d.id)
	}
}

// kill kills the driver with SIGKILL (no chance to release anything).
func (d *driver) kill() {
	d.t.Helper()
	// The script execs the driver, so the process is the driver itself.
	if err := d.cmd.Process.Kill(); err != nil {
		d.t.Fatal(err)
	}
	err := <-d.exited
	d.exited <- err
}

// near reports whether a and b agree to a millionth.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

// mixed returns n drivers against s, alternating the languages, named
// prefix-lang-i.
func mixed(t *testing.T, s *server, prefix string, n int) []*driver {
	ds := make([]*driver, n)
	for i := range ds {
		lang := langs[i%len(langs)]
		ds[i] = startDriver(t, lang, s, fmt.Sprintf("%s-%s-%d", prefix, lang, i))
	}
	return ds
}
