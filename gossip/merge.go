package gossip

import (
	"errors"
	"net/netip"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/fdb"
)

// The merge rules, membership and the tables. The comment at the top of
// node.go explains them. Functions named ...Locked expect n.cluster.mu held;
// the others (merge, leaving, gc, localState) take it themselves.

// mergeBatchSize bounds how many records are merged per hold of
// n.cluster.mu, so a large push/pull does not hold up broadcasts.
const mergeBatchSize = 512

// merge merges records received from a peer. With relay, the records that
// were new to us are queued for broadcast (an epidemic: each node passes on
// what it learned once).
func (n *Node) merge(recs []record, relay bool) {
	for len(recs) > 0 {
		batch := recs[:min(len(recs), mergeBatchSize)]
		recs = recs[len(batch):]
		now := time.Now()
		n.cluster.mu.Lock()
		for i := range batch {
			if n.mergeLocked(&batch[i], now) && relay {
				n.broadcastLocked(&batch[i])
			}
		}
		n.cluster.mu.Unlock()
	}
}

// mergeLocked merges one record received from a peer and reports whether it
// was new to us.
func (n *Node) mergeLocked(r *record, now time.Time) bool {
	n.stats.received.Add(1)
	if n.clock.tooNew(r.version) {
		// Nobody, the owner included, could answer it with a newer one.
		n.stats.future.Add(1)
		n.warnLocked("future:"+r.owner, now, "refused records beyond the allowed clock skew (a forger, or a clock far ahead)",
			"owner", r.owner, "key", r.key.String(), "ahead", time.Duration(r.version-uint64(now.UnixNano())).Round(time.Second),
			"max_skew", maxSkew)
		return false
	}
	if r.owner == n.name {
		n.mergeOwnLocked(r, now)
		return false
	}
	n.clock.observe(r.version)
	cur := n.cluster.store.get(r.key, r.owner)
	if cur != nil && !r.newer(&cur.record) {
		n.countOld(r, &cur.record)
		return false
	}
	m := n.cluster.members[r.owner]
	if m == nil || !m.alive {
		n.holdLocked(r, now) // not relayed: we cannot check it yet
		return false
	}
	if !n.admissibleLocked(r, m) {
		return false
	}
	if cur == nil && n.cluster.store.n >= maxRecords {
		n.stats.tableErrors.Add(1)
		return false
	}
	n.putLocked(r, now)
	n.stats.applied.Add(1)
	return true
}

// countOld counts a received record that is not newer than ours.
func (n *Node) countOld(r, cur *record) {
	if *r == *cur {
		n.stats.duplicate.Add(1)
	} else {
		n.stats.stale.Add(1)
	}
}

// admissibleLocked checks a record of an alive member against its
// metadata, and counts it if it is refused.
func (n *Node) admissibleLocked(r *record, m *member) bool {
	switch {
	case r.version < m.meta.boot:
		n.stats.stale.Add(1) // from a previous run of the owner
		return false
	case r.kind == kindFDB && r.vtep != m.meta.vtep:
		n.stats.foreignVTEP.Add(1)
		return false
	case n.pinnedElsewhereLocked(r): // see pinned.go
		n.stats.rejectedPinned.Add(1)
		return false
	case !n.quotaLocked(r): // see quota.go
		return false
	}
	return true
}

// dropPendingLocked removes a pending record.
func (n *Node) dropPendingLocked(pk pendingKey) {
	if _, ok := n.cluster.pending[pk]; !ok {
		return
	}
	delete(n.cluster.pending, pk)
	if n.cluster.pendingBy[pk.owner]--; n.cluster.pendingBy[pk.owner] <= 0 {
		delete(n.cluster.pendingBy, pk.owner)
	}
}

// holdLocked keeps a record whose owner is not an alive member in the
// pending set.
func (n *Node) holdLocked(r *record, now time.Time) {
	pk := pendingKey{r.key, r.owner}
	if p := n.cluster.pending[pk]; p != nil {
		if !r.newer(&p.record) {
			n.countOld(r, &p.record)
			return
		}
	} else if len(n.cluster.pending) >= maxPending {
		n.stats.unknownOwner.Add(1)
		return
	} else {
		n.cluster.pendingBy[r.owner]++
	}
	n.cluster.pending[pk] = &stored{record: *r, at: now}
}

// mergeOwnLocked handles a record in our own name coming back from a peer.
// We are the authority on our records: if the peer's is newer than ours, or
// live while we hold none, we publish what we hold (or a tombstone) at a
// version above it.
func (n *Node) mergeOwnLocked(r *record, now time.Time) {
	n.clock.observe(r.version)
	cur := n.cluster.store.get(r.key, n.name)
	switch {
	case cur != nil && !r.newer(&cur.record):
		n.countOld(r, &cur.record)
		return
	case cur == nil && r.deleted:
		n.stats.stale.Add(1) // a withdrawal of ours that we forgot: nothing to undo
		return
	}
	fix := *r
	if cur != nil {
		fix = cur.record
	} else {
		fix.deleted = true
	}
	fix.version = n.clock.next()
	n.putLocked(&fix, now)
	n.broadcastLocked(&fix)
	n.stats.reannounced.Add(1)
	n.warnLocked("own:"+r.key.String(), now, "a peer held a newer record in our name; published ours again",
		"key", r.key.String(), "their_version", r.version, "their_deleted", r.deleted)
}

// putLocked stores r (replacing the owner's previous record on the key) and
// brings the tables up to date.
func (n *Node) putLocked(r *record, now time.Time) {
	old := n.winnerLocked(r.key)
	n.cluster.store.put(&stored{record: *r, at: now})
	if p := n.cluster.pending[pendingKey{r.key, r.owner}]; p != nil && !p.newer(r) {
		n.dropPendingLocked(pendingKey{r.key, r.owner})
	}
	n.applyLocked(r.key, old, n.winnerLocked(r.key))
	if r.owner == n.name {
		select { // our digest changed: Run's loop publishes it
		case n.metaDirty <- struct{}{}:
		default:
		}
	} else {
		n.watchLocked(r.owner, now)
	}
}

// effectiveLocked reports whether r may win its key: its owner is alive
// and r is from the owner's current run and names the owner's VTEP.
func (n *Node) effectiveLocked(r *stored) bool {
	if r.deleted {
		return false
	}
	if r.owner == n.name {
		return true
	}
	m := n.cluster.members[r.owner]
	return m != nil && m.alive && r.version >= m.meta.boot && (r.kind != kindFDB || r.vtep == m.meta.vtep) &&
		!n.pinnedElsewhereLocked(&r.record)
}

// winnerLocked returns the record that the tables should reflect for k, or
// nil: the effective record with the highest version, ties broken by the
// greater owner name.
func (n *Node) winnerLocked(k key) *stored {
	var best *stored
	for r := n.cluster.store.first(k); r != nil; r = r.next {
		if !n.effectiveLocked(r) {
			continue
		}
		if best == nil || r.version > best.version || (r.version == best.version && r.owner > best.owner) {
			best = r
		}
	}
	return best
}

// applyLocked changes the tables for k whose winner went from old to new
// (either may be nil).
func (n *Node) applyLocked(k key, old, new *stored) {
	if !n.cluster.self.serves(k.vni) || old == new {
		return
	}
	if old != nil && new != nil && old.owner == new.owner && old.sameValue(&new.record) {
		return
	}
	if old != nil && old.owner == n.name && new != nil && new.owner != n.name && k.kind == kindNeigh && n.cfg.Contested != nil {
		n.cfg.Contested(k.vni, k.ip, old.lladdr, new.owner)
	}
	switch {
	case new != nil && new.owner != n.name:
		n.setLocked(new)
	case old != nil && old.owner != n.name:
		n.unsetLocked(old)
	}
}

// setLocked writes r to its table with origin gossip.
func (n *Node) setLocked(r *stored) {
	var err error
	switch r.kind {
	case kindFDB:
		err = n.cfg.FDB.Set(fdb.Entry{VNI: r.vni, MAC: r.mac, VTEP: r.vtep, Origin: fdb.OriginGossip,
			Reserved: n.tapMACLocked(&r.record)}) // see quota.go
	case kindNeigh:
		_, err = n.cfg.Neigh.Set(fdb.Neigh{VNI: r.vni, IP: r.ip, MAC: r.lladdr, Origin: fdb.OriginGossip})
	}
	switch {
	case errors.Is(err, fdb.ErrOutranked):
		n.stats.outranked.Add(1)
	case err != nil:
		n.stats.tableErrors.Add(1)
		n.warnLocked("table", time.Now(), "a table refused a gossip entry", "err", err)
	}
}

// unsetLocked removes r's gossip entry from its table if the entry still
// holds r's value: a MAC that moved, or was learned elsewhere since, stays.
func (n *Node) unsetLocked(r *stored) {
	var removed bool
	switch r.kind {
	case kindFDB:
		if v, ok := n.cfg.FDB.Lookup(r.vni, r.mac); ok && v == r.vtep {
			removed = n.cfg.FDB.DeleteOrigin(r.vni, r.mac, fdb.OriginGossip)
		}
	case kindNeigh:
		if m, ok := n.cfg.Neigh.Lookup(r.vni, r.ip); ok && m == r.lladdr {
			removed = n.cfg.Neigh.DeleteOrigin(r.vni, r.ip, fdb.OriginGossip)
		}
	}
	if removed {
		n.stats.withdrawn.Add(1)
	}
}

// broadcastLocked queues r for gossip. A queued older record of the same
// key and owner is dropped.
func (n *Node) broadcastLocked(r *record) {
	n.queue.QueueBroadcast(&broadcast{name: r.id(), msg: appendEntries(nil, []record{*r})})
}

// memberUpLocked handles a join or an update of node (self included). It
// reports whether the node is now an alive member.
func (n *Node) memberUpLocked(node *memberlist.Node) bool {
	md, err := n.readMeta(node.Meta)
	if err != nil { // NotifyAlive refuses those; this is a safety net
		n.refuse(node.Name, err)
		return false
	}
	now := time.Now()
	m := n.cluster.members[node.Name]
	if m != nil {
		m.downSeq = 0 // back alive: a deferred withdrawal is off
	}
	core := node.Meta
	if md.hasDigest {
		core = core[:len(core)-digestLen]
	}
	addr, _ := netip.AddrFromSlice(node.Addr)
	if m != nil && m.alive && md.hasDigest && m.meta.hasDigest && string(m.core) == string(core) &&
		m.addr == netip.AddrPortFrom(addr.Unmap(), node.Port) {
		// Only the digest changed (the member's records did): nothing
		// but the pulls cares. At scale this is most updates.
		m.meta.digest = md.digest
		m.dmax = node.DMax // the same run: the same as before
		n.watchLocked(node.Name, now)
		return false
	}
	if m == nil {
		m = &member{name: node.Name}
		n.cluster.members[node.Name] = m
	}
	m.core = slices.Clone(core)
	m.dmax = node.DMax
	// The keys whose winner the update may change: every key of the
	// member's records when their standing changes (it comes alive, a new
	// run, another VTEP or TAP MAC); otherwise only the keys pinned before
	// or now, whose others' records lose or count again. A member at its
	// full quota holds 8192 records: walking them at every update of its
	// metadata cost 3.5 ms under n.cluster.mu (issue 26).
	var keys []key
	if !m.alive || m.meta.boot != md.boot || m.meta.vtep != md.vtep || m.meta.mac != md.mac {
		keys = n.affectedKeysLocked(node.Name)
		keys = append(keys, n.pinnedKeysLocked(&m.meta)...)
		keys = append(keys, n.pinnedKeysLocked(&md)...)
	} else if !slices.Equal(m.meta.macs, md.macs) || !slices.Equal(m.meta.addrs, md.addrs) {
		keys = append(n.pinnedKeysLocked(&m.meta), n.pinnedKeysLocked(&md)...)
	}
	olds := make([]*stored, len(keys))
	for i, k := range keys {
		olds[i] = n.winnerLocked(k)
	}

	m.addr = netip.AddrPortFrom(addr.Unmap(), node.Port)
	if node.Name != n.name {
		select {
		case n.memberSeen <- struct{}{}:
		default:
		}
	}
	wasAlive, oldMeta := m.alive, m.meta
	if !m.alive {
		m.alive, m.leaving, m.left, m.since = true, false, false, now
	}
	if m.meta.boot != md.boot { // a new run: drop the records of the old one
		// and its leave intent: the new run has not said it is leaving,
		// and a failure of it is a failure (deadGrace), not a leave.
		m.leaving = false
		for _, r := range slices.Clone(n.cluster.store.owned(node.Name)) {
			if r.version < md.boot {
				n.cluster.store.del(r.key, r.owner)
			}
		}
	}
	m.meta = md
	if !wasAlive || sourcesDiffer(&oldMeta, &md) {
		n.cluster.sourcesChanged = true
	}
	switch {
	case !wasAlive:
		n.addPinsLocked(m)
	case !slices.Equal(oldMeta.macs, md.macs) || !slices.Equal(oldMeta.addrs, md.addrs):
		n.rebuildPinsLocked()
	}
	n.mergePendingLocked(m, now)
	for i, k := range keys {
		n.applyLocked(k, olds[i], n.winnerLocked(k))
	}
	switch {
	case !wasAlive && m.name != n.name:
		n.floodAddLocked(m)
	case m.name == n.name || oldMeta.vtep != md.vtep || !slices.Equal(oldMeta.vnis, md.vnis):
		n.setFloodLocked()
	}
	if md.hasDigest {
		n.watchLocked(node.Name, now)
	}
	return true
}

// mergePendingLocked merges the records that waited for m, now alive
// (or of a new run): each as if it arrived now, and relayed now that it
// checks out.
func (n *Node) mergePendingLocked(m *member, now time.Time) {
	for pk, p := range n.cluster.pending {
		if n.cluster.pendingBy[m.name] == 0 {
			break
		}
		if pk.owner != m.name {
			continue
		}
		n.dropPendingLocked(pk)
		cur := n.cluster.store.get(p.key, p.owner)
		switch {
		case cur != nil && !p.newer(&cur.record):
			n.countOld(&p.record, &cur.record)
		case !n.admissibleLocked(&p.record, m):
		case cur == nil && n.cluster.store.n >= maxRecords:
			n.stats.tableErrors.Add(1)
		default:
			n.cluster.store.put(&stored{record: p.record, at: now})
			n.stats.applied.Add(1)
			n.broadcastLocked(&p.record) // relayed now that it checks out
		}
	}
}

// memberDownLocked handles memberlist declaring a member dead or left. It
// reports whether an alive member went down.
func (n *Node) memberDownLocked(name string) bool {
	m := n.cluster.members[name]
	if m == nil || !m.alive || name == n.name {
		return false
	}
	keys := n.cluster.store.keysOf(name)
	olds := make([]*stored, len(keys))
	for i, k := range keys {
		olds[i] = n.winnerLocked(k)
	}
	m.alive, m.left, m.since = false, m.leaving, time.Now()
	n.cluster.sourcesChanged = true
	n.rebuildPinsLocked()
	for i, k := range keys {
		n.applyLocked(k, olds[i], n.winnerLocked(k))
	}
	n.floodDelLocked(m)
	return true
}

// leaving records the leave intent of a member's run started at boot, and
// relays it the first time.
func (n *Node) leaving(name string, boot uint64) {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	m := n.cluster.members[name]
	if m == nil || m.meta.boot != boot || m.leaving {
		return
	}
	m.leaving = true
	if !m.alive {
		m.left = true
	}
	n.queue.QueueBroadcast(&broadcast{name: "leave/" + name, msg: appendLeave(nil, name, boot)})
}

// affectedKeysLocked returns the keys of the owner's stored and pending
// records.
func (n *Node) affectedKeysLocked(owner string) []key {
	keys := n.cluster.store.keysOf(owner)
	if n.cluster.pendingBy[owner] == 0 {
		return keys
	}
	for pk := range n.cluster.pending {
		if pk.owner == owner && n.cluster.store.get(pk.key, owner) == nil {
			keys = append(keys, pk.key)
		}
	}
	return keys
}

// setFloodLocked sets the flood list of every served VNI: the static peers,
// then the VTEPs of the alive members serving it, sorted. It walks every
// member: joins and departures, frequent at scale, use floodAddLocked and
// floodDelLocked instead.
func (n *Node) setFloodLocked() {
	alive := 1 // self
	for _, m := range n.cluster.members {
		if m.alive && m.name != n.name {
			alive++
		}
	}
	n.numAlive.Store(int32(alive))
	for _, vni := range n.cluster.self.vnis {
		var vteps []netip.AddrPort
		for _, m := range n.cluster.members {
			if m.alive && m.name != n.name && m.meta.serves(vni) && m.meta.vtep != n.cluster.self.vtep {
				vteps = append(vteps, m.meta.vtep)
			}
		}
		slices.SortFunc(vteps, netip.AddrPort.Compare)
		n.cluster.floodVTEPs[vni] = vteps
		n.publishFloodLocked(vni)
	}
}

// floodAddLocked adds m, another member that came alive, to the flood lists.
func (n *Node) floodAddLocked(m *member) {
	n.numAlive.Add(1)
	for _, vni := range n.cluster.self.vnis {
		if m.meta.serves(vni) && m.meta.vtep != n.cluster.self.vtep {
			vteps := n.cluster.floodVTEPs[vni]
			i, _ := slices.BinarySearchFunc(vteps, m.meta.vtep, netip.AddrPort.Compare)
			n.cluster.floodVTEPs[vni] = slices.Insert(vteps, i, m.meta.vtep)
			n.publishFloodLocked(vni)
		}
	}
}

// floodDelLocked takes m, another member that went down, out of the flood
// lists.
func (n *Node) floodDelLocked(m *member) {
	n.numAlive.Add(-1)
	for _, vni := range n.cluster.self.vnis {
		vteps := n.cluster.floodVTEPs[vni]
		if i, ok := slices.BinarySearchFunc(vteps, m.meta.vtep, netip.AddrPort.Compare); ok {
			n.cluster.floodVTEPs[vni] = slices.Delete(vteps, i, i+1)
			n.publishFloodLocked(vni)
		}
	}
}

// publishFloodLocked sets vni's flood list in the table (but while held:
// release does then).
func (n *Node) publishFloodLocked(vni fdb.VNI) {
	if n.held.Load() {
		return
	}
	n.cfg.FDB.SetFlood(vni, append(slices.Clone(n.cfg.StaticPeers), n.cluster.floodVTEPs[vni]...))
}

// gc drops tombstones, and the records of members departed, older than
// tombstoneTTL, and pending records older than pendingTTL.
func (n *Node) gc(now time.Time) {
	n.cluster.mu.Lock()
	defer n.cluster.mu.Unlock()
	var drop []*stored
	n.cluster.store.owners(func(owner string, recs []*stored) {
		m := n.cluster.members[owner]
		gone := owner != n.name && (m == nil || (!m.alive && now.Sub(m.since) > n.tombstoneTTL))
		for _, r := range recs {
			if gone || (r.deleted && now.Sub(r.at) > n.tombstoneTTL) {
				drop = append(drop, r)
			}
		}
	})
	for _, r := range drop {
		n.cluster.store.del(r.key, r.owner)
	}
	for name, m := range n.cluster.members {
		if !m.alive && now.Sub(m.since) > n.tombstoneTTL {
			delete(n.cluster.members, name)
		}
	}
	for pk, p := range n.cluster.pending {
		if now.Sub(p.at) > pendingTTL {
			n.dropPendingLocked(pk)
			n.stats.unknownOwner.Add(1)
		}
	}
	for s, t := range n.cluster.warned {
		if now.Sub(t) > time.Minute {
			delete(n.cluster.warned, s)
		}
	}
}

// localState encodes the records of alive owners (ours included), live and
// tombstones, for a push/pull: at most maxBatch of them (the store holds no
// more, but for a few of our own tombstones), and the extensions' sections.
// Dormant and pending records stay here: their owners are not members of
// the cluster. Without join (memberlist's periodic push/pull) only our
// records and those of owners without a digest (version 4 nodes) go: the
// others' owners publish digests, and whoever lacks their records pulls
// them (pull.go), so carrying every record of the cluster every period
// (a megabyte at 1000 nodes of 10 endpoints) repairs nothing more. Joins
// (a new node, a settling sync, a partition healing by rejoin) carry
// everything: the joiner needs it, and the stale records a healed side
// sends reach their owners, who answer them (authority).
func (n *Node) localState(join bool) []byte {
	n.cluster.mu.Lock()
	recs := make([]record, 0, n.cluster.store.n)
	n.cluster.store.owners(func(owner string, owned []*stored) {
		m := n.cluster.members[owner]
		if owner != n.name && (m == nil || !m.alive || (!join && m.meta.hasDigest)) {
			return
		}
		for _, r := range owned {
			recs = append(recs, r.record)
		}
	})
	n.cluster.mu.Unlock()
	sections := make([]section, len(n.exts))
	for i, e := range n.exts { // without n.cluster.mu: see extension.go
		sections[i] = section{typ: e.Type(), data: e.LocalState()}
	}
	return appendState(nil, recs[:min(len(recs), maxBatch)], sections)
}

// warnLocked logs a warning at most once a minute per subject.
func (n *Node) warnLocked(subject string, now time.Time, msg string, args ...any) {
	if t, ok := n.cluster.warned[subject]; ok && now.Sub(t) < time.Minute {
		return
	}
	n.cluster.warned[subject] = now
	n.log.Warn(msg, args...)
}
