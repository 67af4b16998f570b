package gossip

// The metadata version the node speaks: the highest every alive member
// reads, so a cluster keeps working through a rolling upgrade or a
// rollback (see "Protocol versions" in node.go's comments).

import (
	"bytes"
	"time"
)

// encodeSelfLocked encodes our metadata, in the version we speak now, with
// the digest of our records (from version 5 on), our source ports (from
// version 6 on) and our features (from version 7 on).
func (n *Node) encodeSelfLocked() []byte {
	n.cluster.self.digest, n.cluster.self.hasDigest = n.cluster.store.digest(n.name), n.cluster.self.version >= 5
	n.cluster.self.hasPorts = n.cluster.self.version >= 6
	n.cluster.self.features = 0
	if n.cluster.self.version >= 7 {
		n.cluster.self.features = n.cfg.features()
	}
	return n.cluster.self.encode()
}

// maxVersion is the highest metadata version this node speaks and reads:
// protoVersion, or 4, 5 or 6 when it emulates an older release (Config.v4,
// Config.v5, Config.v6).
func (n *Node) maxVersion() uint8 {
	switch {
	case n.cfg.v4:
		return 4
	case n.cfg.v5:
		return 5
	case n.cfg.v6:
		return 6
	}
	return protoVersion
}

// spokenVersion returns the metadata version to speak, at most top, to
// members that read at most the versions in dmax (memberlist's DMax of
// each alive member but us): the highest that all of them read. Releases
// before version 5 advertise none (0): they read version 4 only.
func spokenVersion(top uint8, dmax []uint8) uint8 {
	v := top
	for _, d := range dmax {
		v = min(v, max(d, minProtoVersion))
	}
	return v
}

// chooseVersionLocked sets the version of our metadata (n.self.version) to
// what every alive member reads, after a join, an update or a departure.
// When it changes, the switch is counted and logged, and Run's loop
// publishes the metadata (metaDirty): memberlist calls us with its node
// lock held, so UpdateNode cannot be called from here.
func (n *Node) chooseVersionLocked() {
	if n.cfg.v4 {
		return
	}
	var dmax []uint8
	oldest := ""
	for _, m := range n.cluster.members {
		if m.alive && m.name != n.name {
			dmax = append(dmax, m.dmax)
			if m.dmax < n.maxVersion() {
				oldest = m.name
			}
		}
	}
	v := spokenVersion(n.maxVersion(), dmax)
	if v == n.cluster.self.version {
		return
	}
	if v < n.maxVersion() {
		n.log.Info("speaking an older gossip metadata version: a member reads no later one",
			"version", v, "was", n.cluster.self.version, "member", oldest)
	} else {
		n.log.Info("speaking the current gossip metadata version again: every member reads it",
			"version", v, "was", n.cluster.self.version)
	}
	n.cluster.self.version = v
	n.stats.protocolSwitches.Add(1)
	select {
	case n.metaDirty <- struct{}{}:
	default:
	}
}

// publishMeta re-encodes our metadata with the digest of our records and,
// if it changed, tells the cluster (memberlist's UpdateNode, in the
// background, one at a time). It reports whether it is done: false when an
// update is still under way, so the caller tries again later.
func (n *Node) publishMeta() bool {
	if !n.metaBusy.CompareAndSwap(false, true) {
		return false
	}
	n.cluster.mu.Lock()
	changed := n.setMetaLocked(n.encodeSelfLocked())
	n.cluster.mu.Unlock()
	if !changed || n.ml == nil {
		n.metaBusy.Store(false)
		return true
	}
	go func() {
		defer n.metaBusy.Store(false)
		if err := n.updateNode(5 * time.Second); err != nil {
			n.log.Debug("publish metadata", "err", err)
		}
	}()
	return true
}

// setMetaLocked stores b, our metadata just encoded, as what memberlist
// gets (NodeMeta), and reports whether it changed. n.cluster.mu is held
// from the encoding to here, so the encodings are stored in the order they
// were made: an older one never replaces a newer one
// (TestMetaPublishKeepsTheLast).
func (n *Node) setMetaLocked(b []byte) (changed bool) {
	n.meta.mu.Lock()
	defer n.meta.mu.Unlock()
	changed = !bytes.Equal(b, n.meta.encoded)
	n.meta.encoded = b
	return changed
}

// updateNode tells the cluster our metadata (memberlist's UpdateNode),
// one update at a time, waiting at most timeout for the broadcast. An
// update reads the metadata (NodeMeta) before memberlist numbers it (the
// incarnation), and memberlist keeps the highest number: two at once could
// publish the older metadata under the newer number, and it would stay
// until the next change (TestMetaUpdatesInOrder). So a caller waits for
// the update under way, at most its timeout.
func (n *Node) updateNode(timeout time.Duration) error {
	n.publish <- struct{}{}
	defer func() { <-n.publish }()
	return n.ml.UpdateNode(timeout)
}
