package testutil

import (
	"testing"
	"time"
	_ "time/tzdata" // (the zones, wherever the tests run)
)

// Zone returns the IANA time zone name (Europe/Paris, America/New_York,
// UTC), for the tests of calendar limits; it fails tb when the zone
// database does not have it.
func Zone(tb testing.TB, name string) *time.Location {
	tb.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		tb.Fatal(err)
	}
	return loc
}
