// Package perf measures uvxlan's speed: its data path against kernel VXLAN
// and a raw veth on one namespace testbed, in one run and in the same
// conditions (Run), and its control plane's convergence on an in-process
// gossip cluster (RunGossip). Correctness under faults is perf/chaos's.
//
// Run builds its own 2-host testbed with testenv, puts the overlays asked
// for side by side between the two hosts (the underlay addresses
// themselves, a kernel VXLAN device on port 8472 and a pair of uvxlan agents
// on 4789) and the userspace overlays users would pick instead (Open
// vSwitch's userspace datapath, tinc, OpenVPN, wireguard-go, Nebula, n2n)
// each on a 2-host testbed of its own built the same way, then drives
// iperf3 and ping across each and reads the CPU time and peak RSS of each
// userspace overlay's processes from /proc. Each overlay is one
// implementation of a small interface in a file of its own
// (overlay_NAME.go). The results are figures per overlay and the ratios
// uvxlan/kernel, in a Report that encodes as JSON and renders as a table or
// an SVG chart.
// Everything it builds is torn down before it returns, also when its
// context is canceled.
//
// RunGossip starts a cluster of gossip.Node on 127.0.1.x (loopback only)
// with the memberlist timings the agent uses and times how long one new
// entry takes to reach every node, and how long after a node's crash every
// other node has withdrawn its entries.
//
// Run and RunGossip block until done and are safe to call concurrently
// (each builds its own testbed or cluster); a Report is plain data.
package perf
