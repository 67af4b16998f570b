package node

import "net/netip"

// GossipAddr returns the gossip address the node is bound to; the zero
// value with --gossip=false.
func (n *Node) GossipAddr() netip.AddrPort {
	if n.cfg.GossipOff {
		return netip.AddrPort{}
	}
	return n.gossip.Addr()
}

// SetSeeds replaces the gossip seeds found while the node runs, beside
// --join (such as the gossip addresses of other Kubernetes Nodes): those
// not alive are joined at once, and again every rejoin interval. See
// gossip.Node.SetSeeds.
func (n *Node) SetSeeds(seeds []string) error {
	if n.cfg.GossipOff {
		return nil
	}
	return n.gossip.SetSeeds(seeds)
}
