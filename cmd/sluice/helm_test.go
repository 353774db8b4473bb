package main

import (
	"debug/buildinfo"
	"fmt"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-rl/sluice/internal/testutil"
	"github.com/sluice-rl/sluice/internal/testutil/etcdtest"
	"github.com/sluice-rl/sluice/internal/testutil/redistest"
)

// helmVersion is the Helm that scripts/test installs (go install
// helm.sh/helm/v3/cmd/helm@helmVersion) when it is missing.
const helmVersion = "v3.22.0"

// helmChart is the chart's directory, from this package's.
var helmChart = filepath.Join("..", "..", "deploy", "helm", "sluice")

// helmBinary returns the helm to run: $HELM (scripts/test sets it), else
// helm on the PATH, else $GOPATH/bin/helm (where scripts/test installs
// it). Without one the test fails: run scripts/test.
func helmBinary(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		waitHelmBuild(t)
		return h
	}
	if h, err := exec.LookPath("helm"); err == nil {
		return h
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		gopath = build.Default.GOPATH
	}
	if h := filepath.Join(strings.Split(gopath, string(filepath.ListSeparator))[0], "bin", "helm"); fileExists(h) {
		return h
	}
	t.Fatalf("helm not found ($HELM, PATH, $GOPATH/bin): run scripts/test, which installs helm %s (go install helm.sh/helm/v3/cmd/helm@%s)", helmVersion, helmVersion)
	return ""
}

// waitHelmBuild waits for scripts/test's background build of helm, when
// there is one ($SLUICE_HELM_BUILD names the file it writes when done:
// "ok", or why it failed), for at most 10 minutes.
func waitHelmBuild(t *testing.T) {
	t.Helper()
	status := os.Getenv("SLUICE_HELM_BUILD")
	if status == "" {
		return
	}
	start := time.Now()
	for !fileExists(status) {
		if time.Since(start) > 10*time.Minute {
			t.Fatalf("scripts/test's build of helm %s did not finish within 10 minutes (%s)", helmVersion, status)
		}
		time.Sleep(time.Second)
	}
	b, err := os.ReadFile(status)
	if err != nil || strings.TrimSpace(string(b)) != "ok" {
		t.Fatalf("scripts/test's build of helm %s: %s %v", helmVersion, b, err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("waited %v for scripts/test's build of helm", waited.Round(time.Second))
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// helm runs helm args… and returns its standard output, failing t (with
// its standard error) when it fails.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := helmOutput(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func helmOutput(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helmBinary(t), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// TestHelmChart lints and renders the chart (deploy/helm/sluice) for each
// shape with its values file (ci/SHAPE-values.yaml), and holds the
// rendered manifests to what TestDeployArtifacts holds the plain ones to:
// the same document checks (checkDocs), the same shape checks
// (deployShapes), and each shape runs — its servers, started with the
// rendered arguments and ConfigMaps' files (addresses swapped for
// loopback ones, Redis and etcd real), become ready. It also checks that
// the default values render one server and that values naming no shape,
// or a shape without the Redis or etcd it needs, are refused with a
// message naming the value to set.
func TestHelmChart(t *testing.T) {
	// In parallel: after the package's other tests, by when scripts/test's
	// background build of helm is done.
	t.Parallel()
	if info, err := buildinfo.ReadFile(helmBinary(t)); err != nil || info.Main.Version != helmVersion {
		v := "of unknown version"
		if err == nil {
			v = info.Main.Version
		}
		t.Logf("helm %s, not the pinned %s (scripts/test installs it)", v, helmVersion)
	}
	for shape, check := range deployShapes {
		t.Run(shape, func(t *testing.T) {
			values := filepath.Join(helmChart, "ci", shape+"-values.yaml")
			helm(t, "lint", "--strict", helmChart, "-f", values)
			out := helm(t, "template", "sluice", helmChart, "-f", values)
			ws := checkDocs(t, decodeManifests(t, "helm template -f "+values, []byte(out)))
			check(t, ws)
			runShape(t, ws)
		})
	}
	t.Run("defaults", func(t *testing.T) {
		helm(t, "lint", "--strict", helmChart)
		out := helm(t, "template", "sluice", helmChart)
		ws := checkDocs(t, decodeManifests(t, "helm template", []byte(out)))
		deployShapes["one-server"](t, ws)
	})
	t.Run("ServiceMonitor", func(t *testing.T) {
		values := filepath.Join(helmChart, "ci", "doorman-tree-values.yaml")
		helm(t, "lint", "--strict", helmChart, "-f", values, "--set", "metrics.serviceMonitor.enabled=true")
		docs := decodeManifests(t, "helm template", []byte(helm(t, "template", "sluice", helmChart, "-f", values, "--set", "metrics.serviceMonitor.enabled=true")))
		// It selects every Sluice Service of the release by its labels,
		// and scrapes /metrics on their port.
		var monitors, selected int
		for _, d := range docs {
			if d["kind"] != "ServiceMonitor" {
				continue
			}
			monitors++
			exprs := get(d, "spec", "selector", "matchExpressions").([]any)
			for _, s := range docs {
				if s["kind"] != "Service" || strings.HasSuffix(str(s, "metadata", "name"), "-etcd") {
					continue
				}
				labels := get(s, "metadata", "labels").(map[string]any)
				match := true
				for _, e := range exprs {
					e := e.(map[string]any)
					match = match && e["operator"] == "In" && slices.Contains(e["values"].([]any), labels[e["key"].(string)])
				}
				port := get(s, "spec", "ports").([]any)[0].(map[string]any)["name"]
				ep := get(d, "spec", "endpoints").([]any)[0].(map[string]any)
				if !match || ep["port"] != port || ep["path"] != "/metrics" {
					t.Errorf("ServiceMonitor %v does not scrape Service %s (labels %v, port %v)", get(d, "spec"), str(s, "metadata", "name"), labels, port)
				}
				selected++
			}
		}
		if monitors != 1 || selected != 3 {
			t.Errorf("%d ServiceMonitors over %d Services; want 1 over the root's and two intermediates'", monitors, selected)
		}
	})
	// The checks bite: a rendering without what checkDocs requires is
	// reported, each lack by name.
	t.Run("checked", func(t *testing.T) {
		for _, c := range []struct {
			set  string
			want string
		}{
			{"metrics.scrapeAnnotations=false", "no Prometheus scrape annotations"},
			{"readinessProbe.httpGet.path=/healthz", "readinessProbe on \"/healthz\""},
			{"podSecurityContext.runAsNonRoot=false", "not runAsNonRoot"},
			{"extraArgs={--no-such-flag}", "unknown flag: --no-such-flag"},
			{"config=resources: 7", "its configuration does not load"},
		} {
			out := helm(t, "template", "sluice", helmChart, "--set", c.set)
			rec := &errorRecorder{TB: t}
			checkDocs(rec, decodeManifests(t, "helm template --set "+c.set, []byte(out)))
			if !strings.Contains(strings.Join(rec.errs, "\n"), c.want) {
				t.Errorf("--set %s: checkDocs reported %q, want %q", c.set, rec.errs, c.want)
			}
		}
	})
	t.Run("redis", func(t *testing.T) { helmRedis(t) })
	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			name string
			set  []string
			want string
		}{
			{"unknown shape", []string{"shape=two-servers"}, "shape"},
			{"fleet without Redis", []string{"shape=redis-fleet", "redis.deploy=false"}, "redis.url"},
			{"fleet with two Redis", []string{"shape=redis-fleet", "redis.url=redis://a:6379/0", "redis.cluster=b:6379"}, "give one"},
			{"fleet with two Redis", []string{"shape=redis-fleet", "redis.url=redis://a:6379/0", "redis.sentinel=redis://b:26379/0?master_name=m"}, "give one"},
			{"fleet with a Sentinel URL and its Secret", []string{"shape=redis-fleet", "redis.sentinel=redis://b:26379/0?master_name=m", "redis.sentinelSecret.name=s"}, "give one"},
			{"password for the chart's Redis", []string{"shape=redis-fleet", "redis.passwordSecret.name=p"}, "your own Redis"},
			{"TLS for the chart's Redis", []string{"shape=redis-fleet", "redis.tls.enabled=true"}, "your own Redis"},
			{"TLS with redis://", []string{"shape=redis-fleet", "redis.url=redis://a:6379/0", "redis.tls.enabled=true"}, "rediss://"},
			{"TLS files without TLS", []string{"shape=redis-fleet", "redis.url=rediss://a:6379/0", "redis.tls.caSecret.name=ca"}, "redis.tls.enabled"},
			{"TLS on a cluster list with nothing to say so", []string{"shape=redis-fleet", "redis.cluster=a:6379", "redis.tls.enabled=true"}, "rediss:// URL"},
			{"two CAs", []string{"shape=redis-fleet", "redis.url=rediss://a:6379/0", "redis.tls.enabled=true", "redis.tls.caSecret.name=ca", "redis.tls.caFile=/ca.pem"}, "give one"},
			{"fleet without etcd", []string{"shape=redis-fleet", "etcd.deploy=false"}, "etcd.endpoints"},
			{"tree without etcd", []string{"shape=doorman-tree", "etcd.deploy=false"}, "etcd.endpoints"},
		} {
			args := []string{"template", "sluice", helmChart}
			for _, s := range c.set {
				args = append(args, "--set", s)
			}
			out, err := helmOutput(t, args...)
			if err == nil || !strings.Contains(out, c.want) {
				t.Errorf("%s: helm %s: %v, want an error naming %q\n%s", c.name, strings.Join(args, " "), err, c.want, out)
			}
		}
	})
}

// errorRecorder is a testing.TB whose Errorf records the message instead
// of failing the test: for checking that a check reports what it should.
type errorRecorder struct {
	testing.TB
	errs []string
}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// helmRedis checks the chart's redis values (docs/redis.md) for the
// redis-fleet shape: which Redis (one, a cluster, Sentinel), its TLS,
// its password and the keys' prefix become sluice server's flags; every
// secret reaches the servers as a file of a mounted Secret — a whole
// directory, never a subPath, so that a rotated Secret reaches the file
// the server rereads — or, for the Sentinel URL, as a variable from a
// Secret, never as a value in the manifests; the chart then runs no Redis
// of its own. And a fleet started with the rendered flags, the Secret's
// file and a Redis that wants that password becomes ready, decides, and
// keeps every key under the prefix.
func helmRedis(t *testing.T) {
	render := func(t *testing.T, values string) ([]map[string]any, workload) {
		t.Helper()
		file := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(file, []byte("shape: redis-fleet\netcd: {endpoints: \"http://etcd:2379\", deploy: false}\n"+values), 0o644); err != nil {
			t.Fatal(err)
		}
		helm(t, "lint", "--strict", helmChart, "-f", file)
		docs := decodeManifests(t, "helm template -f "+file, []byte(helm(t, "template", "sluice", helmChart, "-f", file)))
		ws := checkDocs(t, docs)
		if len(ws) != 1 {
			t.Fatalf("%d Sluice workloads, want the fleet's", len(ws))
		}
		for _, d := range docs {
			if strings.HasSuffix(str(d, "metadata", "name"), "-redis") {
				t.Errorf("the chart runs a Redis (%s %s) beside the one the values name", d["kind"], str(d, "metadata", "name"))
			}
		}
		return docs, ws[0]
	}
	for _, c := range []struct {
		name, values string
		args         []string          // flag, value, … the servers get
		files        map[string]string // flag → the Secret/key its file is
		env          map[string]string // variable → the Secret/key it is
	}{
		{
			name: "cluster URL over TLS with a password and a prefix",
			values: `redis:
  cluster: rediss://clustercfg.sluice.abc123.use1.cache.amazonaws.com:6379
  passwordSecret: {name: elasticache-auth, key: token}
  tls:
    enabled: true
    caSecret: {name: redis-ca}
    clientCertSecret: {name: sluice-redis-client}
    serverName: redis.internal
  keyPrefix: "team-a:"
`,
			args: []string{"--redis-cluster", "rediss://clustercfg.sluice.abc123.use1.cache.amazonaws.com:6379",
				"--redis-tls-server-name", "redis.internal", "--redis-key-prefix", "team-a:"},
			files: map[string]string{"--redis-password-file": "elasticache-auth/token", "--redis-tls-ca": "redis-ca/ca.crt",
				"--redis-tls-cert": "sluice-redis-client/tls.crt", "--redis-tls-key": "sluice-redis-client/tls.key"},
		},
		{
			name: "cluster list over TLS with a CA file",
			values: `redis:
  cluster: "10.0.0.1:6379,10.0.0.2:6379"
  tls: {enabled: true, caFile: /etc/ca/ca.pem}
`,
			args: []string{"--redis-cluster", "10.0.0.1:6379,10.0.0.2:6379", "--redis-tls-ca", "/etc/ca/ca.pem"},
		},
		{
			name: "Sentinel",
			values: `redis:
  sentinel: redis://redis.default.svc:26379/0?master_name=mymaster
  passwordSecret: {name: redis, key: redis-password}
`,
			args:  []string{"--redis-sentinel", "redis://redis.default.svc:26379/0?master_name=mymaster"},
			files: map[string]string{"--redis-password-file": "redis/redis-password"},
		},
		{
			name: "Sentinel URL from a Secret",
			values: `redis:
  sentinelSecret: {name: sluice-sentinel}
  passwordSecret: {name: redis, key: redis-password}
`,
			files: map[string]string{"--redis-password-file": "redis/redis-password"},
			env:   map[string]string{"SLUICE_REDIS_SENTINEL": "sluice-sentinel/url"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			docs, w := render(t, c.values)
			want := map[string]string{}
			for i := 0; i+1 < len(c.args); i += 2 {
				want[c.args[i]] = c.args[i+1]
			}
			for f := range c.files {
				want[f] = "a file"
			}
			// Exactly the Redis flags asked for, with their values.
			for _, a := range w.args {
				if strings.HasPrefix(a, "--redis") && want[a] == "" {
					t.Errorf("flag %s, not asked for (%v)", a, w.args)
				}
			}
			for i := 0; i+1 < len(c.args); i += 2 {
				if got := w.value(c.args[i]); got != c.args[i+1] {
					t.Errorf("%s %q, want %q", c.args[i], got, c.args[i+1])
				}
			}
			pod := helmPod(t, docs, w.name)
			container := get(pod, "containers").([]any)[0].(map[string]any)
			for flag, from := range c.files {
				secret, key, _ := strings.Cut(from, "/")
				checkSecretFile(t, pod, container, flag, w.value(flag), secret, key)
			}
			envs, _ := container["env"].([]any)
			seen := map[string]bool{}
			for _, e := range envs {
				e := e.(map[string]any)
				name := str(e, "name")
				if strings.HasPrefix(name, "SLUICE_REDIS") && e["value"] != nil {
					t.Errorf("%s is a value in the Deployment, want it from a Secret", name)
				}
				if from, ok := c.env[name]; ok {
					seen[name] = true
					if got := str(e, "valueFrom", "secretKeyRef", "name") + "/" + str(e, "valueFrom", "secretKeyRef", "key"); got != from {
						t.Errorf("%s from %s, want from the Secret's key %s", name, got, from)
					}
				}
			}
			for name := range c.env {
				if !seen[name] {
					t.Errorf("no %s in the container's environment: %v", name, envs)
				}
			}
		})
	}

	t.Run("runs", func(t *testing.T) {
		docs, w := render(t, `redis:
  url: redis://redis:6379/0
  passwordSecret: {name: redis-auth}
  keyPrefix: "fleet-b:"
`)
		pod := helmPod(t, docs, w.name)
		checkSecretFile(t, pod, get(pod, "containers").([]any)[0].(map[string]any), "--redis-password-file", w.value("--redis-password-file"), "redis-auth", "password")
		const password = "s3cret"
		srv := redistest.StartT(t)
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer admin.Close()
		if err := admin.ConfigSet(t.Context(), "requirepass", password).Err(); err != nil {
			t.Fatal(err)
		}
		// The pod's files: the ConfigMaps', and the Secret's as the kubelet
		// writes it (a trailing newline, as kubectl create secret
		// --from-file often leaves).
		dir := podFiles(t, w)
		pw := filepath.Join(dir, w.value("--redis-password-file"))
		if err := os.MkdirAll(filepath.Dir(pw), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(pw, []byte(password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		etcd := etcdtest.StartEtcd(t).Endpoint
		var args []string
		for i := 0; i < len(w.args); i++ {
			a, v := w.args[i], ""
			if i+1 < len(w.args) {
				v = w.args[i+1]
			}
			switch a {
			case "--listen", "--advertise":
				i++
				continue
			case "--config", "--redis-password-file":
				v = filepath.Join(dir, v)
			case "--redis":
				v = "redis://" + srv.Addr + "/0"
			case "--etcd-endpoints":
				v = etcd
			default:
				args = append(args, a)
				continue
			}
			args = append(args, a, v)
			i++
		}
		p := startAdminProc(t, w.name, args...)
		testutil.Eventually(t, 60*time.Second, w.name+" ready (sluice health)", func() bool {
			return exec.Command(binary, "health", "--server", p.addr).Run() == nil
		})
		if got := allowLimitAt(t, p.addr, "helm"); got != 100 {
			t.Errorf("Allow on api says a limit of %d, want the configuration's 100", got)
		}
		reader := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: password})
		defer reader.Close()
		keys, err := reader.Keys(t.Context(), "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			t.Error("no keys in Redis after a decision")
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, "fleet-b:") {
				t.Errorf("key %q outside the prefix fleet-b:", k)
			}
		}
	})
}

// helmPod returns the pod spec of the rendered Deployment name.
func helmPod(t *testing.T, docs []map[string]any, name string) map[string]any {
	t.Helper()
	for _, d := range docs {
		if d["kind"] == "Deployment" && str(d, "metadata", "name") == name {
			return get(d, "spec", "template", "spec").(map[string]any)
		}
	}
	t.Fatalf("no Deployment %s", name)
	return nil
}

// checkSecretFile fails t unless path, the file flag names, is the file of
// the Secret's key, mounted read-only as a whole directory (no subPath:
// the kubelet updates such a file in place when the Secret changes).
func checkSecretFile(t *testing.T, pod, container map[string]any, flag, path, secret, key string) {
	t.Helper()
	if path == "" {
		t.Errorf("no %s", flag)
		return
	}
	mounts, _ := container["volumeMounts"].([]any)
	var mount map[string]any
	for _, m := range mounts {
		if m := m.(map[string]any); str(m, "mountPath") == filepath.Dir(path) {
			mount = m
		}
	}
	if mount == nil || mount["subPath"] != nil || mount["readOnly"] != true {
		t.Errorf("%s %s: not in a read-only directory mount (%v)", flag, path, mount)
		return
	}
	volumes, _ := pod["volumes"].([]any)
	for _, v := range volumes {
		v := v.(map[string]any)
		if str(v, "name") != str(mount, "name") {
			continue
		}
		if got := str(v, "secret", "secretName"); got != secret {
			t.Errorf("%s %s: from Secret %q, want %q (%v)", flag, path, got, secret, v)
		}
		items, _ := get(v, "secret", "items").([]any)
		for _, it := range items {
			it := it.(map[string]any)
			if str(it, "key") == key && str(it, "path") == filepath.Base(path) {
				return
			}
		}
		t.Errorf("%s %s: Secret %s's key %s is not that file (items %v)", flag, path, secret, key, items)
		return
	}
	t.Errorf("%s %s: mount %s has no volume", flag, path, str(mount, "name"))
}
