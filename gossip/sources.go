package gossip

import (
	"slices"
	"strings"
)

// Sources: who may send VXLAN as a member, and what each one takes. Every member's metadata names its
// VTEP and, from version 6 on, the source ports its agent sends from; the
// node's dataplane accepts a member's datagrams from those only, and learns
// nothing from them (a member's MACs come from gossip). Config.SourcesChanged
// hands the dataplane the alive members' VTEPs and ports whenever they
// change: a member comes alive or goes, or its VTEP, ports or features
// change (a restart, or a switch of the version it speaks).

// sourcePorts returns the member's source ports, or nil when its metadata
// has none (before version 6).
func (m *meta) sourcePorts() *SourcePorts {
	if !m.hasPorts {
		return nil
	}
	p := m.ports
	return &p
}

// sourcesDiffer reports whether a member's metadata changed in what
// Sources returns.
func sourcesDiffer(a, b *meta) bool {
	return a.vtep != b.vtep || a.hasPorts != b.hasPorts || (a.hasPorts && a.ports != b.ports) ||
		a.features != b.features
}

// Sources returns the alive members (this node included), their VTEPs,
// the source ports of their VXLAN and whether they take partial inner
// checksums, sorted by name.
func (n *Node) Sources() []Source {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	out := make([]Source, 0, len(n.cluster.members))
	for _, m := range n.cluster.members {
		if m.alive {
			out = append(out, Source{Name: m.name, VTEP: m.meta.vtep, Ports: m.meta.sourcePorts(),
				PartialCsum: m.meta.features&FeaturePartialCsum != 0})
		}
	}
	slices.SortFunc(out, func(a, b Source) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// publishSources calls Config.SourcesChanged if the sources changed since
// the last call. n.cluster.mu must not be held.
func (n *Node) publishSources() {
	if n.held.Load() {
		return // release publishes them
	}
	n.cluster.mu.Lock()
	changed := n.cluster.sourcesChanged
	n.cluster.sourcesChanged = false
	n.cluster.mu.Unlock()
	if changed && n.cfg.SourcesChanged != nil {
		n.cfg.SourcesChanged(n.Sources())
	}
}
