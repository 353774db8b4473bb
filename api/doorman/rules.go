package doorman

import "time"

// MinRequestInterval is the shortest time between two capacity requests of
// one client for one resource: 5 s. A server answers a request that comes
// sooner with the client's current lease, without recording it or running
// the algorithm; a client never sends a resource's request sooner (it
// stretches shorter refresh intervals to this).
//
// Source: doorman-design.md, "Client operation" ("a client may not send
// more GetCapacity requests for a given resource than once every five
// seconds") and "Step 2: Insertion step".
const MinRequestInterval = 5 * time.Second
