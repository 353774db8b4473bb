package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
	"github.com/sluice-rl/sluice/resources"
)

// What can be checked of the deployment files without a container runtime
// or a cluster (docs/running.md, "Deploying"): every Kubernetes document is well-formed with
// the fields its kind needs; each Sluice workload has readiness and
// liveness probes on /readyz and /healthz, resource requests, a non-root
// security context, Prometheus's scrape annotations and a
// PodDisruptionBudget selecting it; its arguments parse as `sluice server`
// flags; its configuration loads; and each shape runs: its servers,
// started with the manifests' arguments (addresses swapped for loopback
// ones, Redis and etcd real), become ready. The Dockerfile and the systemd
// unit run the server the same way. Not checked here: a container build,
// a cluster, systemd itself (docs/running.md, "Deploying").
func TestDeployArtifacts(t *testing.T) {
	root := filepath.Join("..", "..")
	for shape, check := range deployShapes {
		t.Run(shape, func(t *testing.T) {
			ws := checkManifests(t, filepath.Join(root, "deploy", "kubernetes", shape))
			check(t, ws)
			runShape(t, ws)
		})
	}
	t.Run("Dockerfile", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		df := string(data)
		goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(goMod))[1]
		for _, want := range []string{"FROM golang:" + goVersion + " AS build", "CGO_ENABLED=0", "./cmd/sluice", "FROM gcr.io/distroless/static", "USER 65532:65532",
			`HEALTHCHECK`, `"health", "--server", "127.0.0.1:15000"`, "EXPOSE 15000", "COPY --from=build /out/sluice /bin/ratelimit"} {
			if !strings.Contains(df, want) {
				t.Errorf("Dockerfile lacks %q", want)
			}
		}
		m := regexp.MustCompile(`(?m)^CMD \[(.*)\]$`).FindStringSubmatch(df)
		if m == nil {
			t.Fatal("Dockerfile: no CMD")
		}
		var args []string
		for _, a := range strings.Split(m[1], ",") {
			args = append(args, strings.Trim(strings.TrimSpace(a), `"`))
		}
		checkServerArgs(t, args)
	})
	t.Run("systemd", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(root, "deploy", "systemd", "sluice.service"))
		if err != nil {
			t.Fatal(err)
		}
		unit := map[string]string{}
		section := ""
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			switch {
			case line == "" || strings.HasPrefix(line, "#"):
			case strings.HasPrefix(line, "["):
				section = strings.Trim(line, "[]")
			default:
				k, v, ok := strings.Cut(line, "=")
				if !ok {
					t.Errorf("systemd unit: %q is not KEY=VALUE", line)
				}
				unit[section+"."+k] = v
			}
		}
		for _, k := range []string{"Unit.Description", "Service.ExecStart", "Service.ExecReload", "Service.DynamicUser", "Install.WantedBy"} {
			if unit[k] == "" {
				t.Errorf("systemd unit: no %s", k)
			}
		}
		start := strings.Fields(unit["Service.ExecStart"])
		if len(start) < 2 || start[0] != "/usr/local/bin/sluice" {
			t.Fatalf("ExecStart %q", unit["Service.ExecStart"])
		}
		checkServerArgs(t, start[1:])
		if !strings.Contains(unit["Service.ExecReload"], "-HUP") {
			t.Errorf("ExecReload %q: the server rereads its configuration on SIGHUP", unit["Service.ExecReload"])
		}
		if _, err := exec.LookPath("systemd-analyze"); err == nil {
			out, err := exec.Command("systemd-analyze", "verify", filepath.Join(root, "deploy", "systemd", "sluice.service")).CombinedOutput()
			// verify complains about the binary missing on this machine;
			// anything else is a defect of the unit.
			for _, l := range strings.Split(string(out), "\n") {
				if l != "" && !strings.Contains(l, "/usr/local/bin/sluice") && !strings.Contains(l, "Failed to prepare") {
					t.Errorf("systemd-analyze verify: %s (%v)", l, err)
				}
			}
		}
	})
}

// deployShapes checks the Sluice workloads of each shape of the
// deployment files (deploy/kubernetes/SHAPE and the Helm chart's shapes):
// one server; N servers on Redis with their fleet on etcd; a tree of an
// elected root and elected intermediates.
var deployShapes = map[string]func(t *testing.T, ws []workload){
	"one-server": func(t *testing.T, ws []workload) {
		if len(ws) != 1 || ws[0].replicas != 1 {
			t.Errorf("one server: %d workloads", len(ws))
		}
	},
	"redis-fleet": func(t *testing.T, ws []workload) {
		if len(ws) != 1 || ws[0].replicas < 2 || !ws[0].has("--redis") || !ws[0].has("--etcd-endpoints") {
			t.Errorf("N servers on Redis with their fleet on etcd: %+v", ws)
		}
	},
	"doorman-tree": func(t *testing.T, ws []workload) {
		var roots, mids int
		for _, w := range ws {
			switch {
			case w.has("--parent") && w.value("--election") == "etcd":
				mids++
			case w.value("--election") == "etcd":
				roots++
			}
		}
		if roots != 1 || mids < 1 {
			t.Errorf("a tree: %d elected roots, %d elected intermediates", roots, mids)
		}
	},
}

// workload is a Deployment or StatefulSet running `sluice server`.
type workload struct {
	name     string
	replicas int
	args     []string
	config   string            // the configuration its --config names, from its ConfigMap
	files    map[string]string // path in the container → contents, of every ConfigMap it mounts
}

func (w workload) has(flag string) bool { return slices.Contains(w.args, flag) }

func (w workload) value(flag string) string {
	if i := slices.Index(w.args, flag); i >= 0 && i+1 < len(w.args) {
		return w.args[i+1]
	}
	return ""
}

// checkManifests reads every document of dir's YAML files and returns its
// Sluice workloads, failing t for what a document lacks (checkDocs).
func checkManifests(t *testing.T, dir string) []workload {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no manifests (%v)", dir, err)
	}
	var docs []map[string]any
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, decodeManifests(t, f, data)...)
	}
	return checkDocs(t, docs)
}

// decodeManifests decodes the YAML documents of data (from source, for
// errors), skipping empty ones, and fails t for a document without
// apiVersion, kind or metadata.
func decodeManifests(t testing.TB, source string, data []byte) []map[string]any {
	t.Helper()
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	for {
		var d map[string]any
		if err := dec.Decode(&d); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("%s: %v", source, err)
		}
		if d == nil {
			continue // a document of comments only (helm template's)
		}
		for _, k := range []string{"apiVersion", "kind", "metadata"} {
			if d[k] == nil {
				t.Errorf("%s: a document without %s", source, k)
			}
		}
		docs = append(docs, d)
	}
	return docs
}

// checkDocs returns the Sluice workloads of a shape's Kubernetes documents
// (the plain manifests' or the Helm chart's), failing t for what one
// lacks: arguments that do not parse as `sluice server` flags, a probe,
// a resource request, the non-root security context, Prometheus's scrape
// annotations, a PodDisruptionBudget selecting it, or a --config that no
// mounted ConfigMap holds or that does not load.
func checkDocs(t testing.TB, docs []map[string]any) []workload {
	t.Helper()
	configMaps := map[string]map[string]any{}
	var pdbs []map[string]any
	for _, d := range docs {
		switch d["kind"] {
		case "ConfigMap":
			configMaps[str(d, "metadata", "name")], _ = get(d, "data").(map[string]any)
		case "PodDisruptionBudget":
			pdbs = append(pdbs, d)
		}
	}
	var ws []workload
	for _, d := range docs {
		if d["kind"] != "Deployment" && d["kind"] != "StatefulSet" {
			continue
		}
		name := str(d, "metadata", "name")
		pod := get(d, "spec", "template").(map[string]any)
		containers := get(pod, "spec", "containers").([]any)
		c := containers[0].(map[string]any)
		if !strings.Contains(c["image"].(string), "sluice") {
			continue // Redis, etcd
		}
		w := workload{name: name, replicas: get(d, "spec", "replicas").(int), files: map[string]string{}}
		for _, a := range c["args"].([]any) {
			w.args = append(w.args, a.(string))
		}
		if len(w.args) == 0 || w.args[0] != "server" {
			t.Errorf("%s: args %v, want sluice server's", name, w.args)
			continue
		}
		checkServerArgs(t, w.args)
		for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
			if got := str(c, probe, "httpGet", "path"); got != path {
				t.Errorf("%s: %s on %q, want %s", name, probe, got, path)
			}
		}
		for _, r := range []string{"cpu", "memory"} {
			if get(c, "resources", "requests", r) == nil {
				t.Errorf("%s: no %s request", name, r)
			}
		}
		if get(pod, "spec", "securityContext", "runAsNonRoot") != true {
			t.Errorf("%s: not runAsNonRoot", name)
		}
		if str(pod, "metadata", "annotations", "prometheus.io/scrape") != "true" || str(pod, "metadata", "annotations", "prometheus.io/port") != "15000" {
			t.Errorf("%s: no Prometheus scrape annotations", name)
		}
		labels := get(pod, "metadata", "labels").(map[string]any)
		covered := false
		for _, p := range pdbs {
			sel := get(p, "spec", "selector", "matchLabels").(map[string]any)
			match := true
			for k, v := range sel {
				match = match && labels[k] == v
			}
			covered = covered || match
		}
		if !covered {
			t.Errorf("%s: no PodDisruptionBudget selects it", name)
		}
		// The files of the ConfigMaps the container mounts, at their paths.
		volumes := map[string]string{} // volume → ConfigMap
		vs, _ := get(pod, "spec", "volumes").([]any)
		for _, v := range vs {
			v := v.(map[string]any)
			if cm := str(v, "configMap", "name"); cm != "" {
				volumes[str(v, "name")] = cm
			}
		}
		mounts, _ := c["volumeMounts"].([]any)
		for _, m := range mounts {
			m := m.(map[string]any)
			cm, ok := volumes[str(m, "name")]
			if !ok {
				continue
			}
			if configMaps[cm] == nil {
				t.Errorf("%s: mounts ConfigMap %s, which is not in the shape", name, cm)
			}
			for key, data := range configMaps[cm] {
				switch sub := str(m, "subPath"); sub {
				case "":
					w.files[filepath.Join(str(m, "mountPath"), key)] = data.(string)
				case key:
					w.files[str(m, "mountPath")] = data.(string)
				}
			}
		}
		if path := w.value("--config"); path != "" {
			if w.config = w.files[path]; w.config == "" {
				t.Errorf("%s: --config %s is in no ConfigMap it mounts", name, path)
			} else if _, err := resources.Parse([]byte(w.config)); err != nil {
				t.Errorf("%s: its configuration does not load: %v", name, err)
			}
		}
		ws = append(ws, w)
	}
	return ws
}

// checkServerArgs fails t unless args (after "server") parse as `sluice
// server`'s flags.
func checkServerArgs(t testing.TB, args []string) {
	t.Helper()
	if len(args) == 0 || args[0] != "server" {
		t.Errorf("%v: not sluice server", args)
		return
	}
	if err := newServerCmd().Flags().Parse(args[1:]); err != nil {
		t.Errorf("sluice server %v: %v", args[1:], err)
	}
}

// runShape starts the shape's servers with their manifests' arguments —
// loopback addresses, a real Redis and etcd, the ConfigMaps' files
// (configuration, Envoy's rules) at their container paths under a
// temporary directory — roots before intermediates, and waits until `sluice health`
// says each is ready.
func runShape(t *testing.T, ws []workload) {
	t.Helper()
	var redisURL, etcdURL string
	addrs := map[string]string{} // Service name (= workload name) → address
	slices.SortFunc(ws, func(a, b workload) int { return boolInt(a.has("--parent")) - boolInt(b.has("--parent")) })
	for _, w := range ws {
		var args []string
		for i := 0; i < len(w.args); i++ {
			a, v := w.args[i], ""
			if i+1 < len(w.args) {
				v = w.args[i+1]
			}
			switch a {
			case "--listen", "--advertise":
				i++
				continue // startAdminProc listens on 127.0.0.1:0
			case "--config", "--envoy-ratelimit-config":
				v = podFiles(t, w) + v
			case "--redis":
				if redisURL == "" {
					redisURL = "redis://" + redistest.StartT(t).Addr + "/0"
				}
				v = redisURL
			case "--etcd-endpoints":
				if etcdURL == "" {
					etcdURL = etcdtest.StartEtcd(t).Endpoint
				}
				v = etcdURL
			case "--parent":
				host, _, _ := strings.Cut(v, ":")
				if v = addrs[host]; v == "" {
					t.Fatalf("%s: its parent %s is not in the shape", w.name, host)
				}
			default:
				args = append(args, a)
				continue
			}
			args = append(args, a, v)
			i++
		}
		p := startAdminProc(t, w.name, args...)
		addrs[w.name] = p.addr
		testutil.Eventually(t, 60*time.Second, w.name+" ready (sluice health)", func() bool {
			return exec.Command(binary, "health", "--server", p.addr).Run() == nil
		})
	}
}

// podFiles writes w's files (its ConfigMaps' contents) under a new
// directory, each at its path in the container, and returns the directory:
// the container's path P is the directory + P.
func podFiles(t *testing.T, w workload) string {
	t.Helper()
	dir := t.TempDir()
	for path, data := range w.files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, path), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// get walks a decoded YAML document by keys; nil when a key is missing.
func get(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

// str is get as a string ("" when absent).
func str(m map[string]any, keys ...string) string {
	s, _ := get(m, keys...).(string)
	return s
}
