// Command uvxlan is a userspace VXLAN overlay agent: it owns a TAP device,
// encapsulates and decapsulates RFC 7348 frames itself over batched UDP, and
// answers `fdb show` and `stats` on a control socket.
//
// This package is the CLI and the assembly of one node: configuration,
// lifecycle, the control socket, and the testbed and demo commands. It is the
// only place that exits the process.
package main
