package identity_test

import (
	"fmt"

	"github.com/sluice-rl/sluice/internal/identity"
)

// A policy file: checkout may lease its own resources and Allow on
// search; every other identity may Allow on public ones.
func ExamplePolicy_Allows() {
	p, err := identity.ParsePolicy([]byte(`
identities:
  spiffe://example.org/ns/shop/sa/checkout:
    lease: [checkout/*]
    allow: [search]
default:
  allow: [public/**]
`))
	if err != nil {
		panic(err)
	}
	checkout := "spiffe://example.org/ns/shop/sa/checkout"
	fmt.Println(p.Allows(checkout, identity.Lease, "checkout/payments"))
	fmt.Println(p.Allows(checkout, identity.Allow, "public/a"))
	fmt.Println(p.Allows("anyone", identity.Allow, "public/a/b"))
	fmt.Println(identity.Owns(checkout, checkout+"/pod-1"))
	// Output:
	// true
	// false
	// true
	// true
}
