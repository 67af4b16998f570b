// Package controlapi is the agent's control socket as its clients see it:
// the JSON of every answer, and a Client. The socket is HTTP/1.1 with JSON
// bodies over a unix socket (`uvxlan run --control`):
//
//	GET /v1/status   Status: identity, settings, segments
//	GET /v1/fdb      []FDBRow
//	POST /v1/fdb     StaticEntry: add or replace a static entry
//	DELETE /v1/fdb?mac=MAC[&vni=N]  remove a static entry
//	GET /v1/stats    Stats: the data path's counters in total and per
//	                 segment, and gossip's
//	GET /v1/neigh    []NeighRow
//	GET /v1/members  []Member
//	GET /v1/leases   []lease.Lease (routed overlay; empty otherwise)
//	GET /v1/bgp      evpn.Status (with --bgp-peer)
//
// fdb, neigh and stats take ?vni=N to show one segment. The CLI's commands
// (`uvxlan fdb show`, `uvxlan stats`...) print these as tables, or as they
// are with --json; `uvxlan bench chaos` (perf/chaos) reads the agents it
// runs through a Client. Users and tests parse these encodings: a field is
// added, not renamed or removed (cmd/uvxlan's TestControlJSONGolden holds
// them).
//
// The server is the agent's (cmd/uvxlan's control.go, an adapter over
// node's read API; POST /v1/takeover is takeover.go's). This package
// imports no part of the agent, so that clients outside cmd/uvxlan can use
// it; node declares its Status as this package's.
package controlapi
