// Package lease hands out flannel-style subnet leases through gossip alone:
// the cluster network (Config.Network) is cut into subnets of
// Config.SubnetLen bits and every node leases one, with no datastore. The
// leases are replicated state riding a gossip.Node as a gossip.Extension.
// A node may ask for one subnet (a reservation) and announce extra prefixes
// it serves besides its lease, which every node routes to it (routes.go).
// The network is IPv4 or IPv6; a dual-stack node runs one Leases of each,
// and members that know only IPv4 leases skip the IPv6 ones.
//
// Create the leases with New, pass Leases.Extensions in gossip.Config, and
// wait for this node's lease with WaitLease once the node runs. Leases'
// methods are safe for concurrent use; the rules (who wins a subnet,
// renewals, expiry, authority) are explained at the top of lease.go.
package lease
