// Command uvxlan is a userspace VXLAN overlay agent: it owns a TAP device,
// encapsulates and decapsulates RFC 7348 frames itself over batched UDP, and
// gossips its tables with its peers; `uvxlan run` starts one, and the other
// commands talk to a running one over its control socket (fdb, neigh,
// members, stats, status, leases, bgp), build namespace testbeds, run the
// demo, and benchmark overlays (bench).
//
// This package is the CLI: flags and the configuration file to node.Config,
// the pieces of a running agent that live beside the node (routed mode's
// host networking, the Kubernetes subnet manager, the control socket,
// metrics, takeover; see agent.go), and the show commands. It is the only
// place that exits the process.
package main
