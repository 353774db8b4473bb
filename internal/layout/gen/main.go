// Command gen writes the module's import graph, docs/imports.txt (see
// package layout), from `go list`. Run it from anywhere in the module after
// adding, moving or removing a package or an import between the module's
// packages:
//
//	go run ./internal/layout/gen
//
// With -check it writes nothing and exits 1 when the file is stale.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluice-rl/sluice/internal/layout"
)

func main() {
	check := flag.Bool("check", false, "write nothing; exit 1 if "+layout.ImportsFile+" is stale")
	flag.Parse()
	if err := gen(*check); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func gen(check bool) error {
	m, err := layout.Load(context.Background(), ".")
	if err != nil {
		return err
	}
	path := filepath.Join(m.Root, layout.ImportsFile)
	graph := m.Graph()
	if check {
		old, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(old, graph) {
			return fmt.Errorf("%s is stale: run go run ./internal/layout/gen", layout.ImportsFile)
		}
		return nil
	}
	return os.WriteFile(path, graph, 0o644)
}
