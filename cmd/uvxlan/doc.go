// Command uvxlan is a userspace VXLAN overlay agent: it owns a TAP device,
// encapsulates and decapsulates RFC 7348 frames itself over batched UDP, and
// answers `fdb show` and `stats` on a control socket.
//
// This package is the CLI and the process around one node: flags into
// node.Config, the control socket's server (its API and client are package
// controlapi's), the metrics, takeover and SIGHUP, routed mode's host
// networking (runAgent in agent.go; node.New builds the node itself: see
// both for which half lives where), and the testbed commands (demo,
// simulate, bench: perf's benchmarks and perf/chaos). It is the only place
// that exits the process.
package main
