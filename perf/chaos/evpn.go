// The chaos bench's EVPN layer (Config.EVPN): one more host, the fabric's,
// runs FRR as the route reflector of every agent (each also a BGP EVPN
// speaker beside gossip) and a kernel VXLAN VTEP under FRR's zebra with an
// endpoint behind it; its faults (the route reflector restarted or cut
// off, a session reset, gossip cut where EVPN carries on); and its truth
// check, the kernel's FDB on the fabric's host.

package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
)

const (
	// chaosASN is the fabric's AS: iBGP, the route reflector's clients
	// are the agents.
	chaosASN = 65000
	// chaosVNI is the agents' VNI (uvxlan's default --vni) and the
	// kernel VTEP's.
	chaosVNI = 1
	// chaosGossipPort is the agents' gossip port (uvxlan's default).
	chaosGossipPort = 7946
)

// fabric is the EVPN fabric's host: FRR as the route reflector and a
// kernel VTEP with one endpoint.
type fabric struct {
	host *testenv.Host
	frr  *testenv.FRR
	vtep *testenv.EVPNVTEP
	// mu serializes what is done to bgpd (a restart, a session reset).
	mu sync.Mutex
}

// startFabric starts FRR on h, the testbed's last host, as a route
// reflector for every address of the underlay's /24 (`bgp listen range`,
// route-reflector clients), with a kernel VTEP of chaosVNI whose endpoint
// has address ep.
func startFabric(ctx context.Context, h *testenv.Host, ep netip.Prefix) (*fabric, error) {
	if err := noIPv6(h); err != nil {
		return nil, err
	}
	f := &fabric{host: h}
	var err error
	if f.vtep, err = h.AddEVPNVTEP(ctx, chaosVNI, ep); err != nil {
		return nil, err
	}
	if err := noIPv6(f.vtep.Endpoint); err != nil {
		return nil, err
	}
	f.frr, err = h.StartFRR(ctx, testenv.FRRConfig{ASN: chaosASN, AdvertiseAllVNI: true,
		Listen: netip.PrefixFrom(h.Underlay, 24).Masked(), ListenRRClient: true})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// agentArgs are the flags that make an agent an EVPN speaker of f.
func (f *fabric) agentArgs() []string {
	return []string{"--bgp-peer", f.host.Underlay.String(), "--bgp-asn", strconv.Itoa(chaosASN)}
}

// restartBGPd stops bgpd (its sessions end with a Cease, zebra removes
// what it installed) and starts it again with the same configuration.
func (f *fabric) restartBGPd(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frr.RestartBGPd(ctx)
}

// resetSession resets the route reflector's session with the agent at
// addr (vtysh clear bgp: a Cease, and the session comes back).
func (f *fabric) resetSession(ctx context.Context, addr netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := f.frr.Vtysh(ctx, "clear bgp "+addr.String())
	return err
}

// kernelDiff compares the fabric's kernel FDB (what zebra wrote from the
// routes) with the truth: every MAC behind an agent's VTEP, and the flood
// list holding every agent's VTEP (vteps), nothing else.
func (f *fabric) kernelDiff(ctx context.Context, t truth, vteps []netip.Addr) tableDiff {
	node := f.host.Name + " (kernel)"
	entries, err := f.host.FDB(ctx, f.vtep.VXLAN)
	if err != nil {
		return tableDiff{Missing: []Mismatch{{Node: node, Table: "fdb", Key: "*", Got: err.Error()}}}
	}
	return t.compareKernel(node, f.host.Underlay, entries, vteps)
}

// compareKernel returns how the entries of a kernel VTEP (`bridge fdb show
// dev`) of the host named node, whose VTEP is self, differ from t: every
// MAC of t behind another VTEP must be there behind it, and the flood list
// (the all-zeros MAC) must hold vteps and nothing else.
func (t truth) compareKernel(node string, self netip.Addr, entries []testenv.FDBEntry, vteps []netip.Addr) tableDiff {
	var d tableDiff
	seen := map[fdb.MAC]bool{}
	flood := map[netip.Addr]bool{}
	for _, e := range entries {
		if !e.Dst.IsValid() || len(e.MAC) != 6 {
			continue // the bridge's own entries, not the VTEP's
		}
		mac := fdb.MAC(e.MAC)
		if mac.IsZero() {
			flood[e.Dst] = true
			if !slices.Contains(vteps, e.Dst) {
				d.Stale = append(d.Stale, Mismatch{Node: node, Table: "flood", Key: e.Dst.String()})
			}
			continue
		}
		seen[mac] = true
		want, ok := t.vtep[mac]
		switch {
		case !ok:
			d.Stale = append(d.Stale, Mismatch{Node: node, Table: "fdb", Key: mac.String(), Got: e.Dst.String()})
		case want == self || want != e.Dst:
			d.Wrong = append(d.Wrong, Mismatch{Node: node, Table: "fdb", Key: mac.String(), Want: want.String(), Got: e.Dst.String()})
		}
	}
	for _, mac := range sortedKeys(t.vtep, func(a, b fdb.MAC) int { return slices.Compare(a[:], b[:]) }) {
		if v := t.vtep[mac]; v != self && !seen[mac] {
			d.Missing = append(d.Missing, Mismatch{Node: node, Table: "fdb", Key: mac.String(), Want: v.String()})
		}
	}
	for _, v := range vteps {
		if !flood[v] {
			d.Missing = append(d.Missing, Mismatch{Node: node, Table: "flood", Key: v.String()})
		}
	}
	return d
}

// gossipCut drops gossip (TCP and UDP to chaosGossipPort) between hosts a
// and b, both ways, with an nftables table on a, and returns what undoes
// it. VXLAN and BGP pass.
func gossipCut(ctx context.Context, a, b *testenv.Host) (undo func() error, err error) {
	const table = "uvxgossipcut"
	peer := b.Underlay.String()
	port := strconv.Itoa(chaosGossipPort)
	steps := []string{
		"add table inet " + table,
		"add chain inet " + table + " in { type filter hook input priority 0 ; }",
		"add chain inet " + table + " out { type filter hook output priority 0 ; }",
		"add rule inet " + table + " in ip saddr " + peer + " meta l4proto { tcp, udp } th dport " + port + " drop",
		"add rule inet " + table + " in ip saddr " + peer + " meta l4proto { tcp, udp } th sport " + port + " drop",
		"add rule inet " + table + " out ip daddr " + peer + " meta l4proto { tcp, udp } th dport " + port + " drop",
		"add rule inet " + table + " out ip daddr " + peer + " meta l4proto { tcp, udp } th sport " + port + " drop",
	}
	undo = func() error {
		_, err := a.Run(context.WithoutCancel(ctx), "nft", "delete table inet "+table)
		return err
	}
	for _, s := range steps {
		if _, err := a.Run(ctx, "nft", s); err != nil {
			return nil, errors.Join(fmt.Errorf("chaos: gossip cut %s-%s: %w", a.Name, b.Name, err), undo())
		}
	}
	return undo, nil
}
