// Package node is one uvxlan agent: its segments (one overlay each: a VNI,
// its TAP and engines), the shared underlay sockets and their
// demultiplexers, the tables, the gossip member, the endpoints behind each
// TAP, the path MTU measured to each member (pmtu.go), and routed mode's
// subnet lease (lease.go; the host networking that uses it, routes and ARP
// answers and masquerade, is package routed's). New builds a node from a
// validated Config, Run runs it, Close releases it; the read API (Status,
// Entries, Neighbors, Members, PathMTU, Leases, Stats) is what the control
// socket and the metrics of package main are adapters over (Status is
// served as it is: its type is the control API's, controlapi.Status).
//
// The node opens its TAPs and underlay sockets through TAPOpener and
// Underlay (open.go), the kernel's by default, and may gossip over a given
// memberlist transport: tests run a cluster of nodes in one process over
// in-memory ones (node_cluster_test.go).
//
// What each part writes into the tables:
//   - the node: each segment's TAP MAC (origin local) and the TAP's
//     addresses as IP → MAC bindings; then every endpoint an engine snoops
//     behind its TAP (source MACs, ARP and ND bindings), as local entries,
//     each also announced through gossip in the segment's VNI (endpoints.go);
//   - gossip: the entries other nodes announce (origin gossip), and the
//     flood list of every served VNI (the live members serving it, plus
//     --peer);
//   - the engines: learned entries from received frames (--learning);
//   - the operator: static entries (AddStatic);
//   - routed mode: one ARP answer per remote subnet (package routed).
package node
