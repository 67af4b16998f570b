// Command uvxlan is a userspace VXLAN overlay agent: it owns a TAP device,
// encapsulates and decapsulates RFC 7348 frames itself over batched UDP, and
// gossips its tables with its peers; `uvxlan run` starts one, and the other
// commands talk to a running one over its control socket (fdb, neigh,
// members, stats, status, leases, bgp), build namespace testbeds, run the
// demo, and benchmark overlays (bench).
//
// This package is the CLI and the process around one node: flags into
// node.Config, the control socket's server (its API and client are package
// controlapi's), the metrics, takeover and SIGHUP, routed mode's host
// networking (runAgent in agent.go; node.New builds the node itself: see
// both for which half lives where), and the testbed commands (demo,
// simulate, bench: perf's benchmarks and perf/chaos). It is the only place
// that exits the process.
//
// The testbed commands stay in the agent's binary: `bench` and `bench
// chaos` run this same executable as the agents they measure (--bin's
// default), demo and the README's cluster by hand are the first commands a
// user runs, and none of their code runs unless they are invoked (perf,
// perf/chaos and testenv have no init and start nothing; the binary links
// no package testing).
package main
