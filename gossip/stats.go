package gossip

// The node's counters.

import "sync/atomic"

// Stats are the node's counters. Each is named and documented here, its
// JSON tag naming it in `uvxlan stats` and in the metrics (the fields
// tagged metric:"gauge" are levels, not events); the node counts in
// atomics of its own (counters), which Stats copies into this struct. The
// counts are of records (one entry's claim by one owner), received in
// broadcasts and push/pull.
type Stats struct {
	// Received counts records received from peers.
	Received uint64 `json:"received"`
	// Applied counts received records that were newer than what we held and
	// were stored.
	Applied uint64 `json:"applied"`
	// Stale counts received records older than the one we held (or from a
	// previous run of their owner): ignored.
	Stale uint64 `json:"stale"`
	// Duplicate counts received records equal to the one we held: ignored.
	Duplicate uint64 `json:"duplicate"`
	// RejectedForeignVTEP counts FDB records naming a VTEP other than their
	// owner's.
	RejectedForeignVTEP uint64 `json:"rejected_foreign_vtep"`
	// RejectedFuture counts records whose version is further ahead of our
	// wall clock than the allowed skew (maxSkew, a day): refused, never
	// merged nor relayed (see "Versions" at the top of node.go).
	RejectedFuture uint64 `json:"rejected_future"`
	// RejectedPinned counts records of a key pinned to another node than
	// their owner (see pinned.go).
	RejectedPinned uint64 `json:"rejected_pinned"`
	// RefusedPinned counts claims of this node (endpoints behind its TAP)
	// refused because the key is pinned to another node.
	RefusedPinned uint64 `json:"refused_pinned"`
	// RejectedUnknownOwner counts records of owners that are not alive
	// members, dropped because the pending set was full or because the owner
	// did not join within a minute.
	RejectedUnknownOwner uint64 `json:"rejected_unknown_owner"`
	// DecodeErrors counts undecodable messages (and extension messages and
	// sections that their extension could not decode), dropped whole.
	DecodeErrors uint64 `json:"decode_errors"`
	// Withdrawn counts gossip entries removed from our tables, by
	// withdrawals and departures of their owners.
	Withdrawn uint64 `json:"withdrawn"`
	// Outranked counts winners not written because a local or static entry
	// holds the key.
	Outranked uint64 `json:"outranked"`
	// RejectedQuota counts records beyond their owner's quota of endpoints
	// (Config.MaxEndpoints; see quota.go).
	RejectedQuota uint64 `json:"rejected_quota"`
	// TableErrors counts winners the tables refused otherwise (full).
	TableErrors uint64 `json:"table_errors"`
	// Reannounced counts our own records published again because a peer held
	// a newer one in our name.
	Reannounced uint64 `json:"reannounced"`
	// DeathsRefuted counts members memberlist declared dead that came back
	// alive within the grace before their withdrawal (deadGrace), so their
	// entries were kept.
	DeathsRefuted uint64 `json:"deaths_refuted"`
	// RefusedNodes counts refusals of nodes with incompatible or bad
	// metadata (alive messages and joins).
	RefusedNodes uint64 `json:"refused_nodes"`
	// RefusedVTEP counts refusals of nodes whose metadata VTEP is not
	// theirs to give (see vtepAllowedLocked): they are not members, so never
	// in a flood list. Each is counted in RefusedNodes too.
	RefusedVTEP uint64 `json:"refused_vtep"`
	// ThrottledUpdates counts alive messages of members refused because
	// they changed the member's metadata more often than metaUpdateRate
	// allows (memberlist keeps the metadata it had; a later message or
	// push/pull brings the newer one).
	ThrottledUpdates uint64 `json:"throttled_meta_updates"`
	// UnknownExtension counts broadcasts and push/pull sections of
	// extensions this node does not run: skipped.
	UnknownExtension uint64 `json:"unknown_extension"`
	// RefusedStreams counts inbound gossip TCP streams closed unread
	// because Config.MaxStreams (or MaxStreamsPerHost from their address)
	// were open; see stream.go.
	RefusedStreams uint64 `json:"refused_streams"`
	// CutStreams counts inbound streams cut for sending more than
	// Config.MaxStreamBytes (together with the others open) or lasting
	// longer than Config.StreamTimeout.
	CutStreams uint64 `json:"cut_streams"`
	// Pulls counts pull requests sent to owners whose records we lacked
	// (or held withdrawn), and pushes/pulls with owners of many records;
	// Answers the answers we sent to others' pulls, and RefusedPulls the
	// pull requests we did not answer (the bounds, or not from an alive
	// member). See pull.go.
	Pulls        uint64 `json:"pulls"`
	Answers      uint64 `json:"pull_answers"`
	RefusedPulls uint64 `json:"refused_pulls"`
	// RejectedAnswers counts answers refused whole: from an owner we did
	// not pull from, or with another owner's records (see pull.go).
	RejectedAnswers uint64 `json:"rejected_answers"`
	// ProtocolSwitches counts the changes of the metadata version this
	// node speaks (Member.Protocol of itself): down to 4 when a member
	// that reads no later one comes, up when the last such member is gone.
	ProtocolSwitches uint64 `json:"protocol_switches"`
	// Pending is the number of records now held for owners that are not
	// alive members.
	Pending uint64 `json:"pending" metric:"gauge"`
	// Records is the number of records now held (all owners, tombstones
	// included).
	Records uint64 `json:"records" metric:"gauge"`
}

type counters struct {
	received, applied, stale, duplicate, foreignVTEP, unknownOwner, decodeErrors,
	withdrawn, outranked, tableErrors, reannounced, deathsRefuted, refused, unknownExtension, quota atomic.Uint64
	rejectedPinned, refusedPinned  atomic.Uint64 // see pinned.go
	refusedStreams, cutStreams     atomic.Uint64 // see stream.go
	pulls, answers, pullsRefused   atomic.Uint64 // see pull.go
	protocolSwitches               atomic.Uint64
	future, refusedVTEP, throttled atomic.Uint64
	rejectedAnswers                atomic.Uint64
}

// Stats returns a snapshot of the counters.
func (n *Node) Stats() Stats {
	s := Stats{
		Received:             n.stats.received.Load(),
		Applied:              n.stats.applied.Load(),
		Stale:                n.stats.stale.Load(),
		Duplicate:            n.stats.duplicate.Load(),
		RejectedForeignVTEP:  n.stats.foreignVTEP.Load(),
		RejectedFuture:       n.stats.future.Load(),
		RejectedPinned:       n.stats.rejectedPinned.Load(),
		RefusedPinned:        n.stats.refusedPinned.Load(),
		RejectedUnknownOwner: n.stats.unknownOwner.Load(),
		DecodeErrors:         n.stats.decodeErrors.Load(),
		Withdrawn:            n.stats.withdrawn.Load(),
		Outranked:            n.stats.outranked.Load(),
		TableErrors:          n.stats.tableErrors.Load(),
		Reannounced:          n.stats.reannounced.Load(),
		DeathsRefuted:        n.stats.deathsRefuted.Load(),
		RefusedNodes:         n.stats.refused.Load(),
		RefusedVTEP:          n.stats.refusedVTEP.Load(),
		ThrottledUpdates:     n.stats.throttled.Load(),
		UnknownExtension:     n.stats.unknownExtension.Load(),
		RejectedQuota:        n.stats.quota.Load(),
		RefusedStreams:       n.stats.refusedStreams.Load(),
		CutStreams:           n.stats.cutStreams.Load(),
		Pulls:                n.stats.pulls.Load(),
		Answers:              n.stats.answers.Load(),
		RefusedPulls:         n.stats.pullsRefused.Load(),
		RejectedAnswers:      n.stats.rejectedAnswers.Load(),
		ProtocolSwitches:     n.stats.protocolSwitches.Load(),
	}
	n.cluster.mu.Lock()
	s.Pending, s.Records = uint64(len(n.cluster.pending)), uint64(n.cluster.store.n)
	n.cluster.mu.Unlock()
	return s
}
