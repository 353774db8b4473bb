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
	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			name string
			set  []string
			want string
		}{
			{"unknown shape", []string{"shape=two-servers"}, "shape"},
			{"fleet without Redis", []string{"shape=redis-fleet", "redis.deploy=false"}, "redis.url"},
			{"fleet with two Redis", []string{"shape=redis-fleet", "redis.url=redis://a:6379/0", "redis.cluster=b:6379"}, "give one"},
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
