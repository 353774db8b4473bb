package main

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"go/build"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

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
// message naming the value to set. Shape envoy-ratelimit, which the plain
// manifests do not have, is helmEnvoyRatelimit's: rendered, checked, and
// its container run as a real process.
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
	t.Run("envoy-ratelimit", func(t *testing.T) { helmEnvoyRatelimit(t) })
	t.Run("refused", func(t *testing.T) {
		// erl: shape envoy-ratelimit with a rule file, and set.
		erl := func(set ...string) []string {
			return append([]string{"shape=envoy-ratelimit", `envoyRatelimitConfig.api\.yaml=domain: api`}, set...)
		}
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
			{"a rule file never read", []string{`envoyRatelimitConfig.api\.json=domain: api`}, "envoyRatelimitConfig.api.json"},
			{"envoy-ratelimit without rules", []string{"shape=envoy-ratelimit"}, "envoyRatelimitConfig"},
			{"envoy-ratelimit with rules from files and xDS", erl("envoyRatelimit.env.CONFIG_TYPE=GRPC_XDS_SOTW", "envoyRatelimit.env.CONFIG_GRPC_XDS_SERVER_URL=eg:18001"), "give one"},
			{"envoy-ratelimit on xDS at localhost", []string{"shape=envoy-ratelimit", "envoyRatelimit.env.CONFIG_TYPE=GRPC_XDS_SOTW"}, "envoyRatelimit.env.CONFIG_GRPC_XDS_SERVER_URL"},
			{"envoy-ratelimit with an unknown CONFIG_TYPE", erl("envoyRatelimit.env.CONFIG_TYPE=CONSUL"), "envoyRatelimit.env.CONFIG_TYPE"},
			{"envoy-ratelimit on memcache", erl("envoyRatelimit.env.BACKEND_TYPE=memcache"), "envoyRatelimit.env.BACKEND_TYPE"},
			{"envoy-ratelimit with a per-second Redis", erl("envoyRatelimit.env.REDIS_PERSECOND=true"), "envoyRatelimit.env.REDIS_PERSECOND"},
			{"envoy-ratelimit on a Unix socket", erl("envoyRatelimit.env.GRPC_UDS=/tmp/rl.sock"), "envoyRatelimit.env.GRPC_UDS"},
			{"envoy-ratelimit with two listeners on one port", erl("envoyRatelimit.env.PORT=8081"), "envoyRatelimit.env.PORT"},
			{"envoy-ratelimit with a port that is none", erl("envoyRatelimit.env.DEBUG_PORT=debug"), "envoyRatelimit.env.DEBUG_PORT"},
			{"envoy-ratelimit on loopback", erl("envoyRatelimit.env.GRPC_HOST=127.0.0.1"), "envoyRatelimit.env.GRPC_HOST"},
			{"envoy-ratelimit with a relative RUNTIME_ROOT", erl("envoyRatelimit.env.RUNTIME_ROOT=data"), "envoyRatelimit.env.RUNTIME_ROOT"},
			{"envoy-ratelimit with a password as a value", erl("envoyRatelimit.env.REDIS_AUTH=s3cret"), "envoyRatelimit.secretEnv.REDIS_AUTH"},
			{"envoy-ratelimit with a variable twice", erl("envoyRatelimit.env.REDIS_URL=/r.sock", "envoyRatelimit.secretEnv.REDIS_URL.name=s", "envoyRatelimit.secretEnv.REDIS_URL.key=k"), "give one"},
			{"envoy-ratelimit without Redis", erl("redis.deploy=false"), "envoyRatelimit.env.REDIS_URL"},
			{"envoy-ratelimit with sluice server's Redis values", erl("redis.url=redis://a:6379/0"), "redis.url"},
			{"envoy-ratelimit with HOST:PORT on a unix socket", erl("envoyRatelimit.env.REDIS_URL=redis:6379"), "envoyRatelimit.env.REDIS_SOCKET_TYPE"},
			{"envoy-ratelimit with an unknown REDIS_TYPE", erl("envoyRatelimit.env.REDIS_TYPE=ring"), "envoyRatelimit.env.REDIS_TYPE"},
			{"envoy-ratelimit with a password for the chart's Redis", erl("envoyRatelimit.secretEnv.REDIS_AUTH.name=s", "envoyRatelimit.secretEnv.REDIS_AUTH.key=k"), "your own Redis"},
			{"envoy-ratelimit with TLS to the chart's Redis", erl("envoyRatelimit.env.REDIS_TLS=true"), "your own Redis"},
			{"envoy-ratelimit in memory on two replicas", erl("envoyRatelimit.env.BACKEND_TYPE=memory", "envoyRatelimit.replicas=2"), "envoyRatelimit.replicas"},
			{"envoy-ratelimit with a budget no drain can meet", erl("envoyRatelimit.replicas=2", "envoyRatelimit.minAvailable=2"), "envoyRatelimit.minAvailable"},
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

// ratelimitRender is the rendered shape envoy-ratelimit: its documents,
// and of its one Sluice Deployment the pod, the container, the
// environment (values, and the Secret/key of each variable from a
// Secret) and the files of the ConfigMaps it mounts, at their paths.
type ratelimitRender struct {
	docs           []map[string]any
	name           string
	pod, container map[string]any
	env            map[string]string // variable → value
	secretEnv      map[string]string // variable → SECRET/KEY
	files          map[string]string // path in the container → contents
}

// upstreamVar is envoyproxy/ratelimit's variable name as the rendered
// container has it, def when it is not there.
func (r ratelimitRender) upstreamVar(name, def string) string {
	if v, ok := r.env[name]; ok {
		return v
	}
	return def
}

// rulesDir is where the server reads its rule files:
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, with upstream's
// defaults.
func (r ratelimitRender) rulesDir() string {
	return filepath.Join(r.upstreamVar("RUNTIME_ROOT", "/srv/runtime_data/current"), r.upstreamVar("RUNTIME_SUBDIRECTORY", ""),
		r.upstreamVar("RUNTIME_APPDIRECTORY", "config"))
}

// renderRatelimit lints and renders the chart with values and holds the
// Sluice Deployment to what the shape promises: the image's /bin/ratelimit
// (`sluice envoy-ratelimit` by its name) without arguments; every variable
// one that sluice envoy-ratelimit reads; the three ports, named and
// numbered by GRPC_PORT, PORT and DEBUG_PORT, each a port of the Service;
// readiness on /healthcheck (http), liveness on /healthz (debug); with
// CONFIG_TYPE FILE the rules' ConfigMap mounted read-only where the
// RUNTIME_* variables point; resource requests, the non-root context,
// scrape annotations on DEBUG_PORT's /metrics, and a PodDisruptionBudget
// selecting the pods.
func renderRatelimit(t *testing.T, values string) ratelimitRender {
	t.Helper()
	file := values // a values file, or its contents
	if strings.Contains(values, "\n") {
		file = filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(file, []byte(values), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	helm(t, "lint", "--strict", helmChart, "-f", file)
	r := ratelimitRender{env: map[string]string{}, secretEnv: map[string]string{}, files: map[string]string{}}
	r.docs = decodeManifests(t, "helm template -f "+file, []byte(helm(t, "template", "sluice", helmChart, "-f", file)))
	configMaps := map[string]map[string]any{}
	var deployment map[string]any
	for _, d := range r.docs {
		switch d["kind"] {
		case "ConfigMap":
			configMaps[str(d, "metadata", "name")], _ = get(d, "data").(map[string]any)
		case "Deployment":
			c := get(d, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
			if strings.Contains(str(c, "image"), "sluice") {
				if deployment != nil {
					t.Fatalf("two Sluice Deployments, want one: %s and %s", str(deployment, "metadata", "name"), str(d, "metadata", "name"))
				}
				deployment = d
			}
		}
	}
	if deployment == nil {
		t.Fatal("no Sluice Deployment")
	}
	r.name = str(deployment, "metadata", "name")
	r.pod = get(deployment, "spec", "template", "spec").(map[string]any)
	r.container = get(r.pod, "containers").([]any)[0].(map[string]any)
	c := r.container

	// The command: /bin/ratelimit, which the sluice binary runs as
	// sluice envoy-ratelimit (main.go), with no arguments.
	if cmd, _ := c["command"].([]any); len(cmd) != 1 || cmd[0] != "/bin/"+upstreamName {
		t.Errorf("command %v, want [/bin/%s]", c["command"], upstreamName)
	}
	if c["args"] != nil {
		t.Errorf("args %v, want none: envoyproxy/ratelimit's variables alone", c["args"])
	}
	// The environment: each variable once, a value or a Secret's key,
	// each one that sluice envoy-ratelimit reads.
	read := map[string]bool{}
	ue := reflect.TypeOf(upstreamEnv{})
	for i := range ue.NumField() {
		read[ue.Field(i).Tag.Get("envconfig")] = true
	}
	for name := range ignored {
		read[name] = true
	}
	envs, _ := c["env"].([]any)
	for _, e := range envs {
		e := e.(map[string]any)
		name := str(e, "name")
		if _, dup := r.env[name]; dup || r.secretEnv[name] != "" {
			t.Errorf("variable %s twice", name)
		}
		switch {
		case e["value"] != nil:
			r.env[name] = str(e, "value")
		case get(e, "valueFrom", "secretKeyRef") != nil:
			r.secretEnv[name] = str(e, "valueFrom", "secretKeyRef", "name") + "/" + str(e, "valueFrom", "secretKeyRef", "key")
		default:
			t.Errorf("variable %s: neither a value nor a Secret's key: %v", name, e)
		}
		if !read[name] && !strings.HasPrefix(name, "SLUICE_") {
			t.Errorf("variable %s: not one that sluice envoy-ratelimit reads", name)
		}
	}
	// The three listeners: container ports and the Service's.
	want := map[string]string{"grpc": r.upstreamVar("GRPC_PORT", "8081"), "http": r.upstreamVar("PORT", "8080"), "debug": r.upstreamVar("DEBUG_PORT", "6070")}
	got := map[string]string{}
	ports, _ := c["ports"].([]any)
	for _, p := range ports {
		p := p.(map[string]any)
		got[str(p, "name")] = fmt.Sprint(p["containerPort"])
	}
	if !maps.Equal(got, want) {
		t.Errorf("container ports %v, want %v (GRPC_PORT, PORT, DEBUG_PORT)", got, want)
	}
	var service map[string]any
	for _, d := range r.docs {
		if d["kind"] == "Service" && str(d, "metadata", "name") == r.name {
			service = d
		}
	}
	if service == nil {
		t.Fatalf("no Service %s", r.name)
	}
	got = map[string]string{}
	sports, _ := get(service, "spec", "ports").([]any)
	for _, p := range sports {
		p := p.(map[string]any)
		if str(p, "targetPort") != str(p, "name") {
			t.Errorf("Service port %s: targetPort %v", str(p, "name"), p["targetPort"])
		}
		got[str(p, "name")] = fmt.Sprint(p["port"])
	}
	if !maps.Equal(got, want) {
		t.Errorf("Service ports %v, want %v", got, want)
	}
	// Probes: upstream's /healthcheck for readiness, Sluice's /healthz
	// (alive while it waits for rules) for liveness.
	for probe, want := range map[string][2]string{"readinessProbe": {"/healthcheck", "http"}, "livenessProbe": {"/healthz", "debug"}} {
		if path, port := str(c, probe, "httpGet", "path"), str(c, probe, "httpGet", "port"); path != want[0] || port != want[1] {
			t.Errorf("%s on %s port %s, want %s port %s", probe, path, port, want[0], want[1])
		}
	}
	for _, res := range []string{"cpu", "memory"} {
		if get(c, "resources", "requests", res) == nil {
			t.Errorf("no %s request", res)
		}
	}
	if get(r.pod, "securityContext", "runAsNonRoot") != true {
		t.Error("not runAsNonRoot")
	}
	annotations := get(deployment, "spec", "template", "metadata", "annotations")
	if a, _ := annotations.(map[string]any); a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != want["debug"] || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v, want DEBUG_PORT's /metrics", annotations)
	}
	labels := get(deployment, "spec", "template", "metadata", "labels").(map[string]any)
	covered := false
	for _, d := range r.docs {
		if d["kind"] != "PodDisruptionBudget" {
			continue
		}
		match := true
		for k, v := range get(d, "spec", "selector", "matchLabels").(map[string]any) {
			match = match && labels[k] == v
		}
		covered = covered || match
	}
	if !covered {
		t.Error("no PodDisruptionBudget selects the pods")
	}
	// The files of the ConfigMaps it mounts; the rules' where the server
	// reads them.
	volumes := map[string]string{}
	vs, _ := r.pod["volumes"].([]any)
	for _, v := range vs {
		v := v.(map[string]any)
		if cm := str(v, "configMap", "name"); cm != "" {
			volumes[str(v, "name")] = cm
		}
	}
	rulesMounted := false
	mounts, _ := c["volumeMounts"].([]any)
	for _, m := range mounts {
		m := m.(map[string]any)
		cm, ok := volumes[str(m, "name")]
		if !ok {
			continue
		}
		if configMaps[cm] == nil {
			t.Errorf("mounts ConfigMap %s, which is not rendered", cm)
		}
		if m["subPath"] != nil || m["readOnly"] != true {
			t.Errorf("ConfigMap %s: mounted %v, want a read-only directory (a changed ConfigMap reaches the files)", cm, m)
		}
		rulesMounted = rulesMounted || str(m, "mountPath") == r.rulesDir()
		for key, data := range configMaps[cm] {
			r.files[filepath.Join(str(m, "mountPath"), key)] = data.(string)
		}
	}
	if file := strings.EqualFold(r.upstreamVar("CONFIG_TYPE", "FILE"), "FILE"); file != rulesMounted {
		t.Errorf("CONFIG_TYPE %s: the rules' ConfigMap mounted at %s: %t", r.upstreamVar("CONFIG_TYPE", "FILE"), r.rulesDir(), rulesMounted)
	}
	return r
}

// runRatelimit runs the rendered container as a real process: the sluice
// binary under the command's name, with the rendered environment, but
// listening on free loopback ports, the ConfigMaps' files under a
// temporary directory (RUNTIME_ROOT moved there), REDIS_URL at redisAddr
// and REDIS_AUTH, from its Secret, password.
func runRatelimit(t *testing.T, r ratelimitRender, redisAddr, password string) *ratelimitProc {
	t.Helper()
	if cmd, _ := r.container["command"].([]any); len(cmd) != 1 || filepath.Base(fmt.Sprint(cmd[0])) != upstreamName {
		t.Fatalf("command %v: not envoyproxy/ratelimit's", r.container["command"])
	}
	dir := podFiles(t, workload{files: r.files})
	env := maps.Clone(r.env)
	for _, k := range []string{"HOST", "GRPC_HOST", "DEBUG_HOST"} {
		env[k] = "127.0.0.1"
	}
	for _, k := range []string{"PORT", "GRPC_PORT", "DEBUG_PORT"} {
		env[k] = "0"
	}
	env["LOG_LEVEL"] = testutil.ChildLogLevel()
	env["RUNTIME_ROOT"] = filepath.Join(dir, r.upstreamVar("RUNTIME_ROOT", "/srv/runtime_data/current"))
	if _, ok := env["REDIS_URL"]; ok {
		env["REDIS_URL"] = redisAddr
	}
	for name, from := range r.secretEnv {
		if name != "REDIS_AUTH" {
			t.Fatalf("%s from the Secret's key %s: no value for it here", name, from)
		}
		env[name] = password
	}
	return startRatelimit(t, env)
}

// checkRatelimitDecides asks p as Envoy and its operators would: GET
// /healthcheck is 200 OK; POST /json decides (200 within the limit of
// 10 a second, 429 for 11 hits at once), with upstream's RateLimit-*
// headers when LIMIT_RESPONSE_HEADERS_ENABLED; gRPC health knows the
// service as upstream names it; the debug port serves the liveness
// probe's /healthz, /rlconfig and /metrics.
func checkRatelimitDecides(t *testing.T, r ratelimitRender, p *ratelimitProc, client string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, "/healthcheck 200", func() bool {
		code, _ := httpDo(t, "GET", "http://"+p.http+"/healthcheck", "")
		return code == 200
	})
	if code, body := httpDo(t, "GET", "http://"+p.http+"/healthcheck", ""); code != 200 || body != "OK" {
		t.Fatalf("/healthcheck: %d %q, want 200 OK", code, body)
	}
	req := func(hits int) string {
		return fmt.Sprintf(`{"domain": "api", "descriptors": [{"entries": [{"key": "client", "value": %q}]}], "hitsAddend": %d}`, client, hits)
	}
	headers, _ := strconv.ParseBool(r.env["LIMIT_RESPONSE_HEADERS_ENABLED"]) // as envconfig reads it
	for _, c := range []struct {
		hits, code int
		overall    string
	}{{1, 200, "OK"}, {11, 429, "OVER_LIMIT"}} {
		code, body := httpDo(t, "POST", "http://"+p.http+"/json", req(c.hits))
		var resp struct {
			OverallCode          string `json:"overallCode"`
			ResponseHeadersToAdd []struct {
				Key string `json:"key"`
			} `json:"responseHeadersToAdd"`
		}
		if err := json.Unmarshal([]byte(body), &resp); err != nil || code != c.code || resp.OverallCode != c.overall {
			t.Fatalf("/json with %d hits: %d %s (%v), want %d %s", c.hits, code, body, err, c.code, c.overall)
		}
		var names []string
		for _, h := range resp.ResponseHeadersToAdd {
			names = append(names, h.Key)
		}
		if gotHeaders := slices.Contains(names, "RateLimit-Limit") && slices.Contains(names, "RateLimit-Remaining"); gotHeaders != headers {
			t.Errorf("/json with %d hits: headers %v; LIMIT_RESPONSE_HEADERS_ENABLED %q", c.hits, names, r.env["LIMIT_RESPONSE_HEADERS_ENABLED"])
		}
	}
	if h, err := healthpb.NewHealthClient(testutil.Dial(t, p.grpc)).Check(t.Context(), &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health of ratelimit: %v %v", h, err)
	}
	if code, _ := httpDo(t, "GET", "http://"+p.debug+"/healthz", ""); code != 200 {
		t.Errorf("the liveness probe's /healthz on the debug port: %d", code)
	}
	if code, body := httpDo(t, "GET", "http://"+p.debug+"/rlconfig", ""); code != 200 || !strings.Contains(body, "api.client: unit=SECOND requests_per_unit=10") {
		t.Errorf("/rlconfig: %d %q, want the ConfigMap's rule", code, body)
	}
	if code, body := httpDo(t, "GET", "http://"+p.debug+"/metrics", ""); code != 200 || !strings.Contains(body, `sluice_envoy_ratelimit_hits_total{domain="api",result="over_limit",rule="client"}`) {
		t.Errorf("/metrics on the debug port (the scrape annotations'): %d, no over_limit hits of the rule", code)
	}
}

// checkRedisKeys fails t unless Redis at addr holds keys, each under
// prefix.
func checkRedisKeys(t *testing.T, addr, password, prefix string) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr, Password: password})
	defer rc.Close()
	keys, err := rc.Keys(t.Context(), "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("Redis after the decisions: keys %v, %v", keys, err)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, prefix) {
			t.Errorf("key %q outside CACHE_KEY_PREFIX %q", k, prefix)
		}
	}
}

// helmEnvoyRatelimit checks shape envoy-ratelimit: Sluice as
// envoyproxy/ratelimit, the image's /bin/ratelimit configured by that
// service's variables (renderRatelimit's checks), with its values file
// (the chart's Redis), with a Redis of one's own whose password comes
// from a Secret, in memory on ports of its own, and on rules over xDS.
// The first three run: the rendered container's command and environment
// as a real process (on loopback ports, against a real redis-server),
// which answers /healthcheck and decides on /json.
func helmEnvoyRatelimit(t *testing.T) {
	const rules = `envoyRatelimitConfig:
  api.yaml: |
    domain: api
    descriptors:
      - key: client
        rate_limit: {unit: second, requests_per_unit: 10}
`
	t.Run("values file", func(t *testing.T) {
		r := renderRatelimit(t, filepath.Join(helmChart, "ci", "envoy-ratelimit-values.yaml"))
		// Redis: the chart's, reached by upstream's variables.
		redisName := r.name + "-redis"
		var redisDocs []string
		for _, d := range r.docs {
			if str(d, "metadata", "name") == redisName {
				redisDocs = append(redisDocs, fmt.Sprint(d["kind"]))
			}
		}
		slices.Sort(redisDocs)
		if !slices.Equal(redisDocs, []string{"Deployment", "Service"}) {
			t.Errorf("the chart's Redis: %v, want its Deployment and Service", redisDocs)
		}
		if r.env["REDIS_SOCKET_TYPE"] != "tcp" || r.env["REDIS_URL"] != redisName+":6379" {
			t.Errorf("REDIS_SOCKET_TYPE %q, REDIS_URL %q, want tcp and the chart's Redis, %s:6379", r.env["REDIS_SOCKET_TYPE"], r.env["REDIS_URL"], redisName)
		}
		for k, v := range map[string]string{"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "LOG_LEVEL": "info", "LOG_FORMAT": "json",
			"USE_STATSD": "false", "LIMIT_RESPONSE_HEADERS_ENABLED": "true", "CACHE_KEY_PREFIX": "ratelimit:"} {
			if r.env[k] != v {
				t.Errorf("%s=%q, want %q (the values file's)", k, r.env[k], v)
			}
		}
		if r.rulesDir() != "/data/ratelimit/config" || r.files["/data/ratelimit/config/api.yaml"] == "" {
			t.Errorf("the rules: %v, want api.yaml in /data/ratelimit/config", slices.Collect(maps.Keys(r.files)))
		}
		for _, d := range r.docs {
			switch {
			case d["kind"] == "Deployment" && str(d, "metadata", "name") == r.name:
				if n := get(d, "spec", "replicas"); n != 2 || str(d, "spec", "strategy", "type") != "RollingUpdate" {
					t.Errorf("replicas %v, strategy %v, want 2 rolling", n, get(d, "spec", "strategy"))
				}
			case d["kind"] == "PodDisruptionBudget":
				if get(d, "spec", "minAvailable") != 1 {
					t.Errorf("budget %v, want minAvailable 1", get(d, "spec"))
				}
			}
		}
		srv := redistest.StartT(t)
		p := runRatelimit(t, r, srv.Addr, "")
		checkRatelimitDecides(t, r, p, "values-file")
		checkRedisKeys(t, srv.Addr, "", "ratelimit:")

		// Its ServiceMonitor scrapes the debug port of its Service.
		docs := decodeManifests(t, "helm template", []byte(helm(t, "template", "sluice", helmChart, "-f",
			filepath.Join(helmChart, "ci", "envoy-ratelimit-values.yaml"), "--set", "metrics.serviceMonitor.enabled=true")))
		for _, d := range docs {
			if d["kind"] != "ServiceMonitor" {
				continue
			}
			ep := get(d, "spec", "endpoints").([]any)[0].(map[string]any)
			match := false
			for _, e := range get(d, "spec", "selector", "matchExpressions").([]any) {
				e := e.(map[string]any)
				match = match || e["key"] == "app.kubernetes.io/component" && slices.Contains(e["values"].([]any), any("ratelimit"))
			}
			if !match || ep["port"] != "debug" || ep["path"] != "/metrics" {
				t.Errorf("ServiceMonitor %v: want the ratelimit component's debug port, /metrics", get(d, "spec"))
			}
		}
	})
	t.Run("own Redis with its password from a Secret", func(t *testing.T) {
		r := renderRatelimit(t, `shape: envoy-ratelimit
redis: {deploy: false}
envoyRatelimit:
  env:
    REDIS_SOCKET_TYPE: tcp
    REDIS_URL: redis.redis-system.svc.cluster.local:6379
    CACHE_KEY_PREFIX: "edge:"
  secretEnv:
    REDIS_AUTH: {name: redis-auth, key: password}
`+rules)
		for _, d := range r.docs {
			if strings.HasSuffix(str(d, "metadata", "name"), "-redis") {
				t.Errorf("the chart runs a Redis (%s) beside REDIS_URL's", d["kind"])
			}
		}
		if r.secretEnv["REDIS_AUTH"] != "redis-auth/password" {
			t.Errorf("REDIS_AUTH from %q, want the Secret's key redis-auth/password", r.secretEnv["REDIS_AUTH"])
		}
		if _, ok := r.env["REDIS_AUTH"]; ok {
			t.Error("REDIS_AUTH is a value in the Deployment")
		}
		const password = "s3cret"
		srv := redistest.StartT(t)
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer admin.Close()
		if err := admin.ConfigSet(t.Context(), "requirepass", password).Err(); err != nil {
			t.Fatal(err)
		}
		p := runRatelimit(t, r, srv.Addr, password)
		checkRatelimitDecides(t, r, p, "own-redis")
		checkRedisKeys(t, srv.Addr, password, "edge:")
	})
	t.Run("memory on ports of its own", func(t *testing.T) {
		r := renderRatelimit(t, `shape: envoy-ratelimit
envoyRatelimit:
  replicas: 1
  env: {BACKEND_TYPE: memory, GRPC_PORT: 9081, PORT: 9080, DEBUG_PORT: 9070}
`+rules)
		for _, d := range r.docs {
			switch {
			case strings.HasSuffix(str(d, "metadata", "name"), "-redis"):
				t.Errorf("the chart runs a Redis (%s) for counters in memory", d["kind"])
			case d["kind"] == "Deployment" && str(d, "spec", "strategy", "type") != "Recreate":
				t.Errorf("strategy %v, want Recreate: never two replicas counting apart", get(d, "spec", "strategy"))
			case d["kind"] == "PodDisruptionBudget" && get(d, "spec", "maxUnavailable") != 1:
				t.Errorf("budget %v, want maxUnavailable 1: one replica a drain may take", get(d, "spec"))
			}
		}
		if _, ok := r.env["REDIS_URL"]; ok {
			t.Errorf("REDIS_URL %q in memory", r.env["REDIS_URL"])
		}
		checkRatelimitDecides(t, r, runRatelimit(t, r, "", ""), "memory")
	})
	t.Run("rules over xDS", func(t *testing.T) {
		r := renderRatelimit(t, `shape: envoy-ratelimit
envoyRatelimit:
  env:
    CONFIG_TYPE: GRPC_XDS_SOTW
    CONFIG_GRPC_XDS_SERVER_URL: envoy-gateway.envoy-gateway-system.svc.cluster.local:18001
    CONFIG_GRPC_XDS_NODE_ID: envoy-ratelimit
    CONFIG_GRPC_XDS_SERVER_USE_TLS: "true"
    CONFIG_GRPC_XDS_SERVER_TLS_CACERT: /certs/ca.crt
    CONFIG_GRPC_XDS_CLIENT_TLS_CERT: /certs/tls.crt
    CONFIG_GRPC_XDS_CLIENT_TLS_KEY: /certs/tls.key
    FORCE_START_WITHOUT_INITIAL_CONFIG: "true"
extraVolumes: [{name: certs, secret: {secretName: envoy-rate-limit}}]
extraVolumeMounts: [{name: certs, mountPath: /certs, readOnly: true}]
`)
		for _, d := range r.docs {
			if d["kind"] == "ConfigMap" {
				t.Errorf("ConfigMap %s with rules over xDS", str(d, "metadata", "name"))
			}
		}
		if r.env["CONFIG_TYPE"] != "GRPC_XDS_SOTW" || r.env["CONFIG_GRPC_XDS_SERVER_URL"] != "envoy-gateway.envoy-gateway-system.svc.cluster.local:18001" {
			t.Errorf("the xDS variables: %v", r.env)
		}
	})
}
