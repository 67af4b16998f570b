// Package kube is routed mode's subnet manager for Kubernetes
// (--kube-subnet-mgr, flannel's name for the same thing): the node's subnet
// is its Node's spec.podCIDR instead of a lease handed out through gossip,
// and the other nodes' subnets, VTEPs and TAP MACs are read from their
// Nodes through a watch of the API server.
//
// What it does with the API server, as flannel's kube subnet manager does:
//
//   - it watches every Node (one list, then watches from its resource
//     version; after a failure it lists again, after 1 s doubling to 10 s;
//     the cache stays as it was meanwhile, so the API server going away
//     changes nothing on the data path), through a small client of its own
//     (client.go: kubeconfig with a token or client certificate, or a pod's
//     service account; a server over http or with insecure-skip-tls-verify
//     is warned about). What it takes of the server is bounded: lists in
//     pages of 500 Nodes, a page at most 64 MiB, a Node (in a list or a
//     watch event) at most 4 MiB, at most 10 000 Nodes, of which only the
//     fields read are kept; beyond, the list or watch fails, naming the
//     cap, and is retried like any failure. A watch that brings nothing,
//     not even a bookmark, for 2 minutes is opened again;
//   - it waits, logging what it waits for, until its own Node exists and
//     has a podCIDR (spec.podCIDRs, else spec.podCIDR) of each family it
//     routes: an IPv4 one inside --network, an IPv6 one inside --network6
//     (dual stack, or IPv6 only); the podCIDRs of a family it does not
//     route are ignored;
//   - it annotates its Node with its VTEP, gossip address, VNI and TAP MAC
//     (uvxlan.io/*), and flannel's flannel.alpha.coreos.com/backend-type
//     ("vxlan"), backend-data ({"VNI":..,"VtepMAC":..}; backend-v6-data
//     too with --network6), public-ip (public-ipv6 on an IPv6 underlay)
//     and kube-subnet-manager, whose meaning is the same; once the host
//     forwards (Subnets.Forwarding) it adds uvxlan.io/ready and sets the
//     Node's NetworkUnavailable condition to False;
//   - every podCIDR (of a family it routes) of every other Node with
//     uvxlan's annotations is a live subnet (routed.Leases), unless its podCIDR overlaps this node's or
//     that of a Node created earlier (refused, logged and counted:
//     Stats.RefusedPodCIDRs); a Node deleted from the API is gone at once
//     (its route and ARP answers are removed), and the agent whose own Node
//     is deleted stops (Run returns an error), leaving the gossip cluster so
//     that its entries are withdrawn everywhere, as a dead member's are;
//   - the gossip addresses annotated on the other Nodes are the gossip
//     seeds (Seeder), so no --join is needed.
//
// Gossip still carries the FDB and neighbour entries and the authority
// rules; only the subnets come from the API server. Subnets' methods are
// safe for concurrent use.
package kube
