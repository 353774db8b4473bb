package algorithm

import (
	"fmt"
	"strings"
)

// Kind names a capacity-division algorithm. The values and names are those
// of the wire enum doorman.Algorithm_Kind (NO_ALGORITHM = 0 … FAIR_SHARE =
// 3), so a Kind converts to and from the wire with a cast; the package
// itself imports nothing from the wire (the server's and the
// configuration's tests check that the two agree).
//
// Source: doorman-wire.md, message Algorithm; doorman-design.md,
// "Available algorithms".
type Kind int32

// The algorithms Sluice implements.
const (
	// NoAlgorithm grants every requester what it wants (gets = wants),
	// ignoring capacity. It is what a resource without a template gets.
	NoAlgorithm Kind = 0
	// Static grants gets = min(wants, capacity × subclients): capacity is a
	// per-client cap, not a global one.
	Static Kind = 1
	// ProportionalShare grants every subclient up to an equal share and
	// splits what is left over in proportion to the excess demand.
	ProportionalShare Kind = 2
	// FairShare grants a max-min fair share per subclient.
	FairShare Kind = 3
)

// kindNames are the wire names of the kinds.
var kindNames = map[Kind]string{
	NoAlgorithm:       "NO_ALGORITHM",
	Static:            "STATIC",
	ProportionalShare: "PROPORTIONAL_SHARE",
	FairShare:         "FAIR_SHARE",
}

// String returns the wire name of k (for example "FAIR_SHARE").
func (k Kind) String() string {
	if name, ok := kindNames[k]; ok {
		return name
	}
	return fmt.Sprintf("Kind(%d)", int32(k))
}

// ParseKind parses an algorithm name. It accepts the wire names
// (NO_ALGORITHM, STATIC, PROPORTIONAL_SHARE, FAIR_SHARE), case-insensitively,
// and the design's CamelCase names (None, Static, ProportionalShare,
// FairShare). It returns an error naming the accepted values otherwise.
func ParseKind(s string) (Kind, error) {
	norm := strings.ToUpper(strings.ReplaceAll(strings.ReplaceAll(s, "_", ""), "-", ""))
	switch norm {
	case "NOALGORITHM", "NONE":
		return NoAlgorithm, nil
	case "STATIC":
		return Static, nil
	case "PROPORTIONALSHARE":
		return ProportionalShare, nil
	case "FAIRSHARE":
		return FairShare, nil
	}
	return 0, fmt.Errorf("unknown algorithm %q (want one of NO_ALGORITHM, STATIC, PROPORTIONAL_SHARE, FAIR_SHARE)", s)
}

// Valid reports whether k is one of the known algorithms.
func (k Kind) Valid() bool {
	_, ok := kindNames[k]
	return ok
}
