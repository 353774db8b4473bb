package filestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/filestore"
)

// A hand-written file becomes version 1 when the store first reads it; a
// change through the admin.Service is version 2, kept in FILE.history/.
func Example() {
	dir, _ := os.MkdirTemp("", "filestore-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "config.yaml")
	_ = os.WriteFile(path, []byte("limits:\n  global_default: {size: 10, fill_rate: 1}\n"), 0o644)

	store, err := filestore.Open(path, filestore.Options{Keep: 10})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	snap, _ := store.Read(ctx)
	fmt.Println("version", snap.Version)

	svc := admin.New(store, admin.Options{})
	body, _ := admin.DecodeBody([]byte(`{"size": 20, "fill_rate": 1}`), "application/json")
	res, err := svc.Apply(ctx, admin.Change{Op: admin.OpUpdate, Object: admin.GlobalDefault(), Value: body, IfVersion: snap.Version, User: "alice"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("version", res.Version)
	h, _ := store.History(ctx)
	for _, a := range h {
		fmt.Println(a.Version, a.Op, a.User, a.Object)
	}
	entries, _ := os.ReadDir(store.HistoryDir())
	fmt.Println(len(entries), "files in", filepath.Base(store.HistoryDir()))
	// Output:
	// version 1
	// version 2
	// 2 update alice limits/global_default
	// 1 import  config
	// 4 files in config.yaml.history
}
