package admin_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sluice-rl/sluice/admin"
	"github.com/sluice-rl/sluice/admin/filestore"
)

// Change one bucket of a configuration file: the change is validated by
// the servers' loader, stored as version 2 with its history, and a change
// made against version 1 is then refused.
func Example() {
	dir, _ := os.MkdirTemp("", "admin-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "config.yaml")
	_ = os.WriteFile(path, []byte(`limits:
  resources:
    api:
      domains:
        small: {size: 10, fill_rate: 1} # the small tenant
`), 0o644)

	store, err := filestore.Open(path, filestore.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	svc := admin.New(store, admin.Options{})
	ctx := context.Background()

	body, _ := admin.DecodeBody([]byte(`{"size": 20, "fill_rate": 2}`), "application/json")
	res, err := svc.Apply(ctx, admin.Change{Op: admin.OpUpdate, Object: admin.Domain("api", "small"), Value: body, IfVersion: 1, User: "alice"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("version", res.Version)
	fmt.Print(res.Diff)

	body, _ = admin.DecodeBody([]byte(`{"size": 0, "fill_rate": 2}`), "application/json")
	_, err = svc.Apply(ctx, admin.Change{Op: admin.OpUpdate, Object: admin.Domain("api", "small"), Value: body, IfVersion: 1})
	fmt.Println(err)
	var ce *admin.ConflictError
	fmt.Println(errors.As(err, &ce), ce.Current)

	_, err = svc.Apply(ctx, admin.Change{Op: admin.OpUpdate, Object: admin.Domain("api", "small"), Value: body, IfVersion: 2})
	fmt.Println(err)
	// Output:
	// version 2
	// --- version 1
	// +++ new
	// @@ -2,4 +2,4 @@
	//    resources:
	//      api:
	//        domains:
	// -        small: {size: 10, fill_rate: 1} # the small tenant
	// +        small: {size: 20, fill_rate: 2} # the small tenant
	// configuration changed since you read it: version 2 now
	// true 2
	// invalid configuration: limits.resources.api.domains.small.size: 0 must be > 0 (tokens)
}
