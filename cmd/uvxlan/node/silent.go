package node

// Peers that never send. A static peer, or an alive member, from which no
// VXLAN arrives at all for SilentAfter is reported: logged once, and listed
// by Status as SilentVTEPs. Usually the two sides disagree on the VXLAN
// port (Linux's default for a VXLAN device is 8472, RFC 7348's 4789), or the
// underlay drops UDP between them; an overlay with no traffic at all looks
// the same, which is why this is a report and not an error. The demultiplexers stamp
// each watched source (encap.Heard) after the underlay filter lets it in.

import (
	"context"
	"net/netip"
	"slices"
	"time"
)

// DefaultSilentAfter is Config.SilentAfter when zero.
const DefaultSilentAfter = 30 * time.Second

// watchSilence keeps the watched sources up to date (static peers, alive
// members), and logs each silent one once, until ctx is done.
func (n *Node) watchSilence(ctx context.Context) {
	every := min(n.cfg.SilentAfter/3, 10*time.Second)
	tick := time.NewTicker(max(every, 100*time.Millisecond))
	defer tick.Stop()
	warned := map[netip.Addr]bool{}
	for {
		n.heard.Watch(n.watched())
		for _, s := range n.Silent() {
			if warned[s.VTEP] {
				continue
			}
			warned[s.VTEP] = true
			n.log.Warn("no VXLAN from this VTEP since it became a "+s.Kind+": check that both sides use the same VXLAN port "+
				"(--port here, dstport on a kernel VXLAN device: Linux's default is 8472, RFC 7348's 4789) and that the underlay passes UDP between them; "+
				"an overlay without traffic looks the same",
				"vtep", s.VTEP, "kind", s.Kind, "name", s.Name, "silent_for", time.Since(s.Since).Round(time.Second), "port", n.cfg.Port)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// watched returns the addresses of the static peers and of the alive
// members other than this node.
func (n *Node) watched() []netip.Addr {
	var out []netip.Addr
	for _, p := range n.cfg.Peers {
		out = append(out, p.Addr())
	}
	for _, m := range n.gossip.Members() {
		if m.State == "alive" && !m.Self && m.VTEP.Addr() != n.cfg.Local && !slices.Contains(out, m.VTEP.Addr()) {
			out = append(out, m.VTEP.Addr())
		}
	}
	return out
}

// Silent returns the peers and members from which no VXLAN arrived for
// SilentAfter since they were first watched.
func (n *Node) Silent() []SilentVTEP {
	silent := n.heard.Silent(n.cfg.SilentAfter, time.Now())
	out := []SilentVTEP{}
	for _, p := range n.cfg.Peers {
		if since, ok := silent[p.Addr()]; ok {
			out = append(out, SilentVTEP{VTEP: p.Addr(), Kind: "peer", Since: since})
			delete(silent, p.Addr())
		}
	}
	for _, m := range n.gossip.Members() {
		if since, ok := silent[m.VTEP.Addr()]; ok {
			out = append(out, SilentVTEP{VTEP: m.VTEP.Addr(), Kind: "member", Name: m.Name, Since: since})
			delete(silent, m.VTEP.Addr())
		}
	}
	slices.SortFunc(out, func(a, b SilentVTEP) int { return a.VTEP.Compare(b.VTEP) })
	return out
}
