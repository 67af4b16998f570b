package node

// The wire gets no more trust than gossip gives. The engines' underlay
// filter (encap.Filter, read lock-free on the receive path) knows, besides
// the flood lists and the --peer and --allow-vtep ranges:
//   - the alive members' VTEP addresses and the source ports each one's
//     agent sends from, which gossip carries in the metadata (version 6):
//     a member's datagrams from another port are dropped (src_port), and
//     nothing is learned from a member's datagrams, since its MACs come
//     from gossip. This node announces its own ports: the source port
//     range's sockets it holds, and the path MTU probes' socket (its VTEP
//     port goes without saying). A member speaking an older version
//     announces none and is accepted from any port;
//   - the VTEPs that static FDB entries name (`uvxlan fdb add`), admitted
//     like --peers for as long as an entry names them, and those the BGP
//     EVPN peers' routes name (plain VXLAN, also under --encrypt), except,
//     under --encrypt, an address bound to a member's key (Node.keyed:
//     alive or lost by gossip, see encrypt.go): a route naming a member's
//     VTEP does not make it a plain VTEP, and the engines never send it
//     plain VXLAN nor take plain from it.
// Learning from the others is capped per VTEP at --max-endpoints
// (fdb.Config.MaxLearned), as gossip caps each member's endpoints.
//
// The metadata (version 7) also says whether a member takes partial inner
// checksums (--partial-checksums): the engines leave to those the checksums
// the host's kernel left for the TAP to finish (encap/partial.go).

import (
	"net/netip"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
)

// sourcePorts returns the ports this node announces besides its VTEP port:
// those of srcs (the source port range's sockets it holds) and extra (the
// path MTU probes' socket; 0: none).
func sourcePorts(srcs []udpSocket, extra uint16) gossip.SourcePorts {
	p := gossip.SourcePorts{Extra: extra}
	for i, c := range srcs {
		port := c.LocalAddr().Port()
		if i == 0 || port < p.First {
			p.First = port
		}
	}
	for _, c := range srcs {
		if d := c.LocalAddr().Port() - p.First; d < 64 { // the range holds at most 64 ports
			p.Mask |= 1 << d
		}
	}
	return p
}

// sourcesChanged is gossip's SourcesChanged: it replaces the filter's
// members, and the VTEPs that take partial inner checksums. Two members at
// one address (which gossip refuses) keep the first one's ports.
func (n *Node) sourcesChanged(srcs []gossip.Source) {
	m := make(map[netip.Addr]encap.Ports, len(srcs))
	partial := map[netip.AddrPort]struct{}{}
	for _, s := range srcs {
		if s.PartialCsum {
			partial[netip.AddrPortFrom(s.VTEP.Addr().Unmap(), s.VTEP.Port())] = struct{}{}
		}
		a := s.VTEP.Addr().Unmap()
		if _, dup := m[a]; dup {
			continue
		}
		var p encap.Ports // nil ports: any port
		if s.Ports != nil {
			p = encap.Ports{Listen: s.VTEP.Port(), Extra: s.Ports.Extra, First: s.Ports.First, Mask: s.Ports.Mask}
		}
		m[a] = p
	}
	n.filter.SetMembers(m)
	n.partial.Set(partial)
}

// partialPeers is the engines' EngineConfig.Partial: the members that take
// partial inner checksums, when this node leaves them so
// (Config.PartialCsum); nil otherwise.
func (n *Node) partialPeers() *encap.PartialPeers {
	if !n.cfg.PartialCsum {
		return nil
	}
	return &n.partial
}

// refreshStatic gives the filter the VTEPs of the static FDB entries and
// of the BGP peers' routes (evpn.go) but the members' (Node.keyed), after
// one was added or removed, or a member's address was bound or let go.
// Concurrent calls are serialised: each sets what it saw last.
func (n *Node) refreshStatic() {
	n.staticMu.Lock()
	defer n.staticMu.Unlock()
	m := map[netip.Addr]uint16{}
	if p := n.evpnVTEPs.Load(); p != nil {
		for a, port := range *p {
			if !n.keyed(a) {
				m[a] = port
			}
		}
	}
	for _, e := range n.table.EntriesOf(fdb.OriginStatic) {
		if e.Origin == fdb.OriginStatic {
			m[e.VTEP.Addr().Unmap()] = e.VTEP.Port()
		}
	}
	n.filter.SetStatic(m)
}
