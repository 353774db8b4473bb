package layout

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The committed generated code of every language is what its generator
// makes of the .proto files now: the Go stubs of api/ (go generate
// ./api/..., each package's //go:generate line) and the Python client's
// artefacts (clients/python/generate.sh). Each test runs the generator on
// copies of the protos in a scratch directory, exactly as committed, and
// compares what it writes with the committed files byte for byte; so a
// .proto changed without `scripts/generate` fails here. The Java and C++
// clients generate their stubs at build time and commit none.
//
// They need Debian's protoc (protobuf-compiler, which scripts/test
// installs); without it they skip, saying so.

// needProtoc returns protoc's path and version, or skips the test.
func needProtoc(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc is not installed (Debian's protobuf-compiler; scripts/test installs it): the committed stubs cannot be checked")
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		t.Fatalf("protoc --version: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// moduleRoot returns the directory holding go.mod, statting go.mod and
// go.sum (the plugins' versions) for go test's cache.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatal("not in a module")
	}
	root := filepath.Dir(gomod)
	for _, f := range []string{"go.mod", "go.sum"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// copyFile copies src to dst (making dst's directory), reading src in
// this process so that go test's cache sees it.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, st.Mode().Perm()); err != nil {
		t.Fatal(err)
	}
}

// compareOutputs compares every file under gen (what a generator wrote)
// with the file at the same path under committed, and says how to fix a
// difference.
func compareOutputs(t *testing.T, gen, committed, rel, protoc, fix string) (files []string) {
	t.Helper()
	err := filepath.WalkDir(gen, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		r, err := filepath.Rel(gen, path)
		if err != nil {
			return err
		}
		files = append(files, r)
		want, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		name := filepath.Join(rel, r)
		got, err := os.ReadFile(filepath.Join(committed, r))
		if err != nil {
			t.Errorf("%s: generated, but not committed (%v); run %s", name, err, fix)
			return nil
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: generated now, with %s, it differs%s; run %s", name, protoc, firstDifference(got, want), fix)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Errorf("%s generated nothing", fix)
	}
	return files
}

// firstDifference describes the first line where got and want differ.
func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf(" (line %d: committed %q, generated %q)", i+1, trim(gl), trim(wl))
		}
	}
	return ""
}

func trim(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

var (
	goGenerate = regexp.MustCompile(`(?m)^//go:generate sh -c (".*")$`)
	goTool     = regexp.MustCompile(`\$\(go tool -n ([A-Za-z0-9._/-]+)\)`)
	// goStub names the files protoc's Go plugins write.
	goStub = regexp.MustCompile(`(\.pb\.go|\.connect\.go)$`)
)

// TestGoStubsFresh runs each //go:generate line of api/ on copies of its
// package's .proto files and compares the Go it writes with the committed
// files; a committed generated file no .proto makes any more is stale too.
func TestGoStubsFresh(t *testing.T) {
	protoc := needProtoc(t)
	root := moduleRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tools := map[string]string{} // go tool name -> its binary
	var generators []string
	err := filepath.WalkDir(filepath.Join(root, "api"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if goGenerate.Match(b) {
				generators = append(generators, path)
			} else if bytes.Contains(b, []byte("//go:generate")) {
				t.Errorf("%s: a //go:generate line not of the form `sh -c \"…\"` this test runs", path)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(generators) == 0 {
		t.Fatal("no //go:generate line under api/")
	}
	generated := map[string]bool{} // files (relative to root) some generator writes
	for _, gen := range generators {
		dir := filepath.Dir(gen)
		rel, _ := filepath.Rel(root, dir)
		b, err := os.ReadFile(gen)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goGenerate.FindAllSubmatch(b, -1) {
			cmd, err := strconv.Unquote(string(m[1]))
			if err != nil {
				t.Fatalf("%s: %s: %v", gen, m[1], err)
			}
			cmd = goTool.ReplaceAllStringFunc(cmd, func(s string) string {
				name := goTool.FindStringSubmatch(s)[1]
				if tools[name] == "" {
					c := exec.CommandContext(ctx, "go", "tool", "-n", name)
					c.Dir = root
					out, err := c.Output()
					if err != nil {
						t.Fatalf("go tool -n %s: %v", name, err)
					}
					tools[name] = strings.TrimSpace(string(out))
				}
				return tools[name]
			})
			scratch := t.TempDir()
			protos, err := filepath.Glob(filepath.Join(dir, "*.proto"))
			if err != nil || len(protos) == 0 {
				t.Fatalf("%s: no .proto beside it (%v)", gen, err)
			}
			for _, p := range protos {
				copyFile(t, p, filepath.Join(scratch, filepath.Base(p)))
			}
			run := exec.CommandContext(ctx, "sh", "-c", cmd)
			run.Dir = scratch
			if out, err := run.CombinedOutput(); err != nil {
				t.Fatalf("%s: sh -c %q: %v\n%s", rel, cmd, err, out)
			}
			for _, p := range protos {
				if err := os.Remove(filepath.Join(scratch, filepath.Base(p))); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range compareOutputs(t, scratch, dir, rel, protoc, "go generate ./api/... (scripts/generate)") {
				generated[filepath.Join(rel, f)] = true
			}
		}
	}
	err = filepath.WalkDir(filepath.Join(root, "api"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && goStub.MatchString(path) {
			if rel, _ := filepath.Rel(root, path); !generated[rel] {
				t.Errorf("%s is committed but no .proto generates it any more: delete it (or run scripts/generate)", rel)
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPythonStubsFresh runs clients/python/generate.sh in a scratch copy
// of the module holding only the script and api/'s .proto files, and
// compares everything it writes with the committed files (today
// src/sluice/_proto/descriptors.binpb, the descriptor set the client
// builds its messages from at import, and the .pyi type stubs).
func TestPythonStubsFresh(t *testing.T) {
	protoc := needProtoc(t)
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed: clients/python/generate.sh cannot run")
	}
	root := moduleRoot(t)
	const script, out = "clients/python/generate.sh", "clients/python/src/sluice/_proto"
	scratch := t.TempDir()
	copyFile(t, filepath.Join(root, script), filepath.Join(scratch, script))
	err := filepath.WalkDir(filepath.Join(root, "api"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".proto") {
			rel, _ := filepath.Rel(root, path)
			copyFile(t, path, filepath.Join(scratch, rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(scratch, out), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, "bash", filepath.Join(scratch, script))
	run.Dir = scratch
	if b, err := run.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, b)
	}
	compareOutputs(t, filepath.Join(scratch, out), filepath.Join(root, out), out, protoc, script+" (scripts/generate)")
}
