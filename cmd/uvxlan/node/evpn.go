package node

// BGP EVPN (Config.BGP): the node's speaker (package evpn) advertises what
// the node announces through gossip — each segment (type 3), the TAP MACs
// and addresses and the endpoints behind the TAPs (type 2) — and writes
// what its peers advertise into the tables (origin evpn). The endpoint
// trackers announce through a tee of gossip and the speaker, so an
// endpoint learned, moved, re-asserted or withdrawn (probes) is told to
// both control planes at once. Gossip's authority holds over BGP's: a key
// a member announces outranks a route (fdb's ranks), and a key pinned to a
// member (its TAP MAC and addresses) is never taken from a route.

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/evpn"
	"github.com/uvxlan/uvxlan/fdb"
)

// BGP configures the node's BGP EVPN speaker.
type BGP struct {
	ASN      uint32        // --bgp-asn
	RouterID netip.Addr    // --router-id (default: Local)
	Peers    []evpn.Peer   // --bgp-peer
	HoldTime time.Duration // --bgp-hold-time (0: evpn.DefaultHoldTime)
	// ListenPort, when set, accepts sessions on Local at that port too
	// (the speaker always connects to its peers itself).
	ListenPort uint16
	// What a peer may make the speaker hold (0: evpn's defaults):
	MaxPrefixes uint32 // --bgp-max-prefixes, per peer
	MaxMACIP    int    // --bgp-max-type2, type-2 routes per VNI
	MaxVTEPs    int    // --bgp-max-vteps, VTEPs per VNI
	// EVPN routing (l3.go): the L3 VNI (--l3vni; 0: none), its TAP
	// (default DefaultL3Dev) and whether a peer's default route is taken
	// (--l3-default).
	L3VNI     fdb.VNI
	L3Dev     string
	L3Default bool
}

// checkBGP checks the speaker's configuration, giving RouterID its
// default.
func (c *Config) checkBGP() error {
	b := c.BGP
	if b == nil {
		return nil
	}
	switch {
	case b.ASN == 0:
		return badConfig("bgp-asn", "", "--bgp-peer needs this node's AS number (1..4294967295)")
	case len(b.Peers) == 0:
		return badConfig("bgp-peer", "", "--bgp-asn needs at least one peer")
	}
	if !b.RouterID.IsValid() {
		b.RouterID = c.Local
	}
	if !b.RouterID.Is4() {
		return badConfig("router-id", b.RouterID.String(), "must be an IPv4 address (the default is --local, which is not one)")
	}
	return c.checkL3()
}

// startBGP makes the speaker (it speaks once Run runs it).
func (n *Node) startBGP() error {
	b := n.cfg.BGP
	if b == nil {
		return nil
	}
	cfg := evpn.Config{
		ASN: b.ASN, RouterID: b.RouterID, VTEP: n.vtep, Peers: b.Peers, HoldTime: b.HoldTime, ListenPort: b.ListenPort,
		MaxPrefixes: b.MaxPrefixes, MaxMACIP: b.MaxMACIP, MaxVTEPs: b.MaxVTEPs, RefuseVTEP: n.refuseVTEP(),
		VNIs: n.cfg.VNIs(), FDB: n.table, Neigh: n.neigh,
		CheckClaim: func(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
			return n.gossip.CheckClaim(vni, ip, mac)
		},
		Contested: n.contested,
		VTEPsChanged: func(m map[netip.Addr]uint16) {
			n.evpnVTEPs.Store(&m)
			n.refreshStatic()
		},
		Logger: n.log,
	}
	n.l3Config(&cfg)
	sp, err := evpn.New(cfg)
	if err != nil {
		return fmt.Errorf("bgp: %w", err)
	}
	n.bgp = sp
	n.closers = append(n.closers, sp.Close)
	return nil
}

// announcer is what the trackers announce through: gossip, and the
// speaker when there is one.
func (n *Node) announcer() announcer {
	if n.bgp == nil {
		return n.gossip
	}
	return tee{n.gossip, n.bgp}
}

// tee announces to gossip first (its authority checks decide), then to
// the BGP speaker. A speaker's failure is returned but does not undo
// gossip's announcement.
type tee struct {
	gossip announcer
	bgp    announcer
}

func (t tee) AnnounceMAC(vni fdb.VNI, mac fdb.MAC) error {
	if err := t.gossip.AnnounceMAC(vni, mac); err != nil {
		return err
	}
	return t.bgp.AnnounceMAC(vni, mac)
}

func (t tee) WithdrawMAC(vni fdb.VNI, mac fdb.MAC) error {
	err := t.gossip.WithdrawMAC(vni, mac)
	if berr := t.bgp.WithdrawMAC(vni, mac); err == nil {
		err = berr
	}
	return err
}

func (t tee) AnnounceNeigh(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	if err := t.gossip.AnnounceNeigh(vni, ip, mac); err != nil {
		return err
	}
	return t.bgp.AnnounceNeigh(vni, ip, mac)
}

func (t tee) WithdrawNeigh(vni fdb.VNI, ip netip.Addr) error {
	err := t.gossip.WithdrawNeigh(vni, ip)
	if berr := t.bgp.WithdrawNeigh(vni, ip); err == nil {
		err = berr
	}
	return err
}

func (t tee) ReassertNeigh(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	if err := t.gossip.ReassertNeigh(vni, ip, mac); err != nil {
		return err
	}
	return t.bgp.ReassertNeigh(vni, ip, mac)
}

func (t tee) CheckClaim(vni fdb.VNI, ip netip.Addr, mac fdb.MAC) error {
	return t.gossip.CheckClaim(vni, ip, mac)
}

// BGPStatus returns the speaker's sessions, routes per VNI and counters;
// false when the node runs none.
func (n *Node) BGPStatus(ctx context.Context) (evpn.Status, bool) {
	if n.bgp == nil {
		return evpn.Status{}, false
	}
	return n.bgp.Status(ctx), true
}
