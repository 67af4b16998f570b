// Package evpn is the agent's BGP EVPN speaker (RFC 7432, RFC 8365): GoBGP,
// embedded, translating between the fabric's routes and the agent's tables.
// It advertises the node's segments as type-3 routes and its endpoints (TAP
// MACs and addresses, the endpoints behind the TAPs) as type-2 routes, and
// writes the routes its peers advertise into the fdb tables as entries of
// origin evpn, below gossip's and the node's own.
//
// The files: speaker.go holds the Speaker (its configuration, sessions,
// advertisements and status); routes.go the routes as uvxlan reads and
// writes them (RD, RT, labels); rib.go the import side (the best route per
// table key, the ranks, the caps per VNI, the VTEPs refused); prefixes.go
// each peer's prefix limit; l3.go EVPN routing with an L3 VNI (symmetric
// IRB's type-2 routes with the L3 VNI and the Router's MAC, type-5 IP
// prefixes, RFC 9135/9136): what goes out, and the L3 table the node
// installs as the host's routes, with what is refused. What a peer can make the speaker hold is
// bounded (rib.go, prefixes.go), and work per route is proportional to the
// route.
//
// A Speaker's methods are safe for concurrent use. Callbacks it is given
// (Config.Contested, Config.VTEPsChanged, Config.L3Changed,
// Config.RefusePrefix) are called with its lock held and
// must neither block nor call it.
package evpn
