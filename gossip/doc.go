// Package gossip implements uvxlan's control plane on hashicorp/memberlist:
// membership with node metadata (VTEP, VNIs, TAP MAC, protocol version),
// broadcast and anti-entropy of the FDB and neighbour entries each node
// owns, their application to the local fdb.Table and fdb.Neighbors (origin
// gossip), the per-VNI flood lists, and the withdrawal of a node's entries
// when it fails or leaves. Other replicated state rides the same gossip as
// an Extension (subnet leases do: package gossip/lease); see extension.go.
//
// A Node is created with New and driven by Run; its methods are safe for
// concurrent use. The rules (who may announce what, versions, moves,
// tombstones) are explained at the top of node.go; the bounds on inbound
// gossip TCP streams (number, bytes, time) at the top of stream.go.
package gossip
