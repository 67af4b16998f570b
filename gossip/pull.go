package gossip

// Pulls: how a node that missed records catches up within seconds.
//
// Broadcasts reach almost everyone, but not always everyone: a record sent
// before its receiver knew the owner waits in the pending set, a packet is
// lost, a node joins while the others announce. memberlist's periodic
// push/pull repairs that, but its interval grows with the cluster (30 s
// below 33 members, 90 s at 100, 180 s at 1000), so at scale a cold start
// took minutes. Instead every node says in its metadata what it owns (the
// digest: how many live records, and the sum of their hashes; meta.go), and
// every other node compares it with what it holds of that owner
// (store.digest):
//
//  1. Watch. An owner goes on the watch list when its digest arrives (a
//     join, an update of its metadata) and when one of its records is
//     stored. Every pullTick (2 gossip intervals) the node checks the owners
//     it watches: those whose digest matches leave the list.
//  2. Grace. An owner that still differs after pullGrace (5 gossip
//     intervals: the broadcasts of a change travel faster than the metadata
//     that follows it, and arrive in any order) is pulled from.
//  3. Pull. The node sends the owner a pull request (msgPull, one UDP
//     packet naming the requester). The owner answers with the records it
//     owns, live and tombstones, in UDP packets of up to answerBytes
//     (msgAnswer, the entry format); they are merged like broadcasts but
//     not relayed, and only with the records of an owner we pulled from
//     (mergeAnswer). An owner with more live records than an answer
//     carries (maxAnswerRecords) is synced with by push/pull instead (one
//     at a time).
//
// Disagreement. A pull that leaves the digest different (we hold a record
// in the owner's name that it did not make, or one newer than its own: a
// key holder's forgery slipped into a push/pull, which is not relayed, so
// the owner never heard of it; the owner's answer then loses to it) is
// followed, at the next pull, by what we hold in the owner's name, sent to
// the owner (show) as entries. The owner answers those it did not make
// with its own view at a newer version, broadcast (authority, node.go),
// which wins everywhere.
//
// Bounds. Digests and requests come from peers, which may lie: a member
// whose digest never matches what it sends, or a stranger that asks for
// answers in another's name. So each side is bounded:
//
//   - per owner: after each pull, the next one waits pullBackoff, doubling
//     up to maxPullBackoff while the digest still differs; the backoff
//     decays only once the owner has matched for a while;
//   - in total: at most pullsPerTick pulls per pullTick (8, or one per 25
//     members, up to 64), the owners in a random order so that one liar
//     cannot starve the others;
//   - answers: at most one per requester per answerEvery, at most
//     answerRate a second (100, or one per 2 members) and twice that at
//     once, to alive members only.
//
// A pull changes nothing that a broadcast could not: the answer's records
// go through the usual merge rules (owner's VTEP, pins, quotas, versions), so
// lying costs the liar its own answers and nobody's tables.
//
// Cost. A cold start of N nodes puts N digests in memberlist's alive messages
// (12 bytes each) and, for every record a node missed, one request and an
// answer of the owner's records (about 45 bytes each): with 21 records per
// owner (a TAP MAC and 10 endpoints) one packet each way.

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
)

// Message types of the pulls (codec.go has the others).
//
//	pull request:  type (1) = msgPull | boot (8) | name length (1) | name
//	answer:        type (1) = msgAnswer | count (4) | entry × count   (as msgEntries)
//
// The request names the requester (its run, by boot) so that the owner
// answers to the address memberlist knows for it, never to the packet's
// source.
const (
	msgPull   byte = 4
	msgAnswer byte = 5
)

const (
	// minPullsPerTick to maxPullsPerTick bound the pulls a node starts per
	// pullTick: one per pullsPerTickMembers alive members (pullsPerTick).
	// A node that missed something of every owner in a cold start of N
	// nodes (the broadcasts of N×21 records overflow every queue) catches
	// up in about N/(pullsPerTick×2.5) seconds: a fixed 8 per tick took 50 s
	// at 1000 nodes, one per 25 members takes 10.
	minPullsPerTick     = 8
	maxPullsPerTick     = 64
	pullsPerTickMembers = 25
	// maxPullBackoffMult bounds the per-owner backoff, in gossip
	// intervals: 300 (a minute with the LAN timings).
	maxPullBackoffMult = 300
	// answerBytes bounds one answer packet (a UDP packet, under memberlist's
	// 1400-byte UDPBufferSize with its framing and encryption).
	answerBytes = 1100
	// maxAnswerRecords bounds the records of one answer: owners with more
	// live records are synced by push/pull.
	maxAnswerRecords = 1024
	// The answers a node sends are bounded by a token bucket of
	// answerRate(members) a second, twice that at once: at least
	// minAnswerRate, or one for every answerRateMembers alive members (an
	// owner that every other node of a cold start pulls from answers them
	// all in about two seconds). Each member may ask once per answerEvery
	// anyway; the bucket bounds the bytes: 500 answers of at most
	// answerBytes a second at 1000 members.
	minAnswerRate     = 100
	answerRateMembers = 2
	// maxAnswered bounds the requesters remembered for answerEvery.
	maxAnswered = 4096
	// maxQueued bounds the broadcasts queued: beyond it, those sent the
	// most times are dropped (memberlist's Prune) every pullTick. In a
	// cold start of 1000 nodes every node relays every record (21000 with
	// 10 endpoints each), and each is to go out a dozen times or more: a
	// queue that drains in minutes and holds megabytes per node, while the
	// digests and pulls repair whatever a dropped broadcast would have
	// brought. 4096 holds a node's own burst of endpoints (the quota).
	maxQueued = 4096
)

// pullsPerTick is how many pulls a node of a cluster of members alive
// members starts per pullTick at most.
func pullsPerTick(members int) int {
	return min(max(minPullsPerTick, members/pullsPerTickMembers), maxPullsPerTick)
}

// answerRate is how many answers a second a node of a cluster of members
// alive members sends at most.
func answerRate(members int) float64 {
	return float64(max(minAnswerRate, members/answerRateMembers))
}

// pullState is an owner watched or pulled from.
type pullState struct {
	since   time.Time     // watched since (zero: not watched, it matched)
	next    time.Time     // no pull before
	backoff time.Duration // wait after the next pull
	matched time.Time     // when it last matched
}

// pullTimings derive from memberlist's gossip interval, so that tests with
// fast timings pull fast too.
type pullTimings struct {
	tick, grace, backoff, maxBackoff, answerEvery, metaEvery time.Duration
}

func newPullTimings(gossipInterval time.Duration) pullTimings {
	gi := max(gossipInterval, time.Millisecond)
	return pullTimings{
		tick:        2 * gi,
		grace:       5 * gi,
		backoff:     10 * gi,
		maxBackoff:  maxPullBackoffMult * gi,
		answerEvery: 5 * gi,
		metaEvery:   2 * gi,
	}
}

// watchLocked puts owner on the watch list (see the top of this file).
func (n *Node) watchLocked(owner string, now time.Time) {
	if owner == n.name {
		return
	}
	p := n.cluster.pulls[owner]
	if p == nil {
		p = &pullState{backoff: n.pt.backoff}
		n.cluster.pulls[owner] = p
	}
	if p.since.IsZero() {
		p.since = now
	}
}

// matchesLocked reports whether what we hold of member m's records is what
// its digest says; true for members without a digest (version 4).
func (n *Node) matchesLocked(m *member) bool {
	return !m.meta.hasDigest || n.cluster.store.digest(m.name) == m.meta.digest
}

// pullTarget is an owner to pull from.
type pullTarget struct {
	name     string
	addr     netip.AddrPort
	pushPull bool // too many records for an answer
	// show: the previous pull did not settle the digest; the owner is sent
	// what we hold in its name (see "Disagreement" above).
	show bool
}

// duePullsLocked checks the watched owners and returns those to pull from
// now, at most maxPullsPerTick, and advances their backoff.
func (n *Node) duePullsLocked(now time.Time) []pullTarget {
	var due []pullTarget
	for owner, p := range n.cluster.pulls {
		m := n.cluster.members[owner]
		if m == nil || !m.alive {
			delete(n.cluster.pulls, owner)
			continue
		}
		if n.matchesLocked(m) {
			if !p.since.IsZero() {
				p.since, p.matched = time.Time{}, now
			}
			if now.Sub(p.matched) > 4*p.backoff { // quiet for a while: forget the backoff
				delete(n.cluster.pulls, owner)
			}
			continue
		}
		if p.since.IsZero() {
			p.since = now
		}
		if now.Sub(p.since) < n.pt.grace || now.Before(p.next) {
			continue
		}
		due = append(due, pullTarget{name: owner, addr: m.addr, pushPull: m.meta.digest.count > maxAnswerRecords,
			show: p.backoff > n.pt.backoff})
	}
	rand.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	due = due[:min(len(due), pullsPerTick(int(n.numAlive.Load())))]
	for _, t := range due {
		p := n.cluster.pulls[t.name]
		p.next = now.Add(p.backoff)
		p.backoff = min(2*p.backoff, n.pt.maxBackoff)
		n.stats.pulls.Add(1)
	}
	return due
}

// pullMissing bounds the broadcast queue (maxQueued), and pulls from the
// owners whose records we lack (or hold withdrawn); it does not block on the network but for a push/pull with an
// owner of many records, which runs in its own goroutine, one at a time.
func (n *Node) pullMissing() {
	n.queue.Prune(maxQueued)
	n.cluster.mu.Lock()
	due := n.duePullsLocked(time.Now())
	n.cluster.mu.Unlock()
	if len(due) == 0 {
		return
	}
	req := appendPull(nil, n.name, n.cluster.self.boot)
	for _, t := range due {
		if t.pushPull {
			if n.pushPulling.CompareAndSwap(false, true) {
				go func() {
					defer n.pushPulling.Store(false)
					_, err := n.ml.Join([]string{t.addr.String()})
					n.log.Debug("pull by push/pull", "owner", t.name, "err", err)
				}()
			}
			continue
		}
		to := memberlist.Address{Addr: t.addr.String(), Name: t.name}
		if err := n.ml.SendToAddress(to, req); err != nil {
			n.log.Debug("pull request", "owner", t.name, "err", err)
		}
		if t.show {
			n.show(to)
		}
	}
}

// show sends the owner to.Name the records we hold in its name, as entry
// messages of at most answerBytes: it answers those it did not make, or
// that are newer than its own, with its own view (authority). It does not
// block.
func (n *Node) show(to memberlist.Address) {
	n.cluster.mu.Lock()
	held := n.cluster.store.owned(to.Name)
	recs := make([]record, 0, min(len(held), maxAnswerRecords))
	for _, r := range held[:min(len(held), maxAnswerRecords)] {
		recs = append(recs, r.record)
	}
	n.cluster.mu.Unlock()
	for len(recs) > 0 {
		var msg []byte
		msg, recs = appendAnswer(recs, answerBytes)
		msg[0] = msgEntries
		if err := n.ml.SendToAddress(to, msg); err != nil {
			n.log.Debug("show an owner its records", "owner", to.Name, "err", err)
			return
		}
	}
}

// answer handles a pull request: it sends the requester, an alive member,
// the records we own, unless the bounds say no (see the top of this file).
// It does not block.
func (n *Node) answer(name string, boot uint64) {
	now := time.Now()
	n.cluster.mu.Lock()
	m := n.cluster.members[name]
	if m == nil || !m.alive || m.meta.boot != boot || name == n.name || !n.answerAllowedLocked(name, now) {
		n.cluster.mu.Unlock()
		n.stats.pullsRefused.Add(1)
		return
	}
	addr := m.addr
	own := n.cluster.store.owned(n.name)
	recs := make([]record, 0, len(own))
	for _, r := range own {
		if !r.deleted {
			recs = append(recs, r.record)
		}
	}
	for _, r := range own { // tombstones after the live records
		if r.deleted && len(recs) < maxAnswerRecords {
			recs = append(recs, r.record)
		}
	}
	n.cluster.mu.Unlock()
	recs = recs[:min(len(recs), maxAnswerRecords)]
	n.stats.answers.Add(1)
	to := memberlist.Address{Addr: addr.String(), Name: name}
	for len(recs) > 0 {
		var msg []byte
		msg, recs = appendAnswer(recs, answerBytes)
		if err := n.ml.SendToAddress(to, msg); err != nil {
			n.log.Debug("pull answer", "to", name, "err", err)
			return
		}
	}
}

// mergeAnswer merges an answer to one of our pulls, not relayed (we asked,
// the others did not). memberlist does not tell who sent a message, and a
// key holder could send "answers" in anyone's name: an answer is taken only
// with the records of one owner, one we sent a pull to; others are refused
// whole (Stats.RejectedAnswers).
func (n *Node) mergeAnswer(recs []record) {
	if len(recs) == 0 {
		return
	}
	owner := recs[0].owner
	ok := !slices.ContainsFunc(recs, func(r record) bool { return r.owner != owner })
	if ok {
		n.cluster.mu.Lock()
		p := n.cluster.pulls[owner]
		ok = p != nil && !p.next.IsZero()
		n.cluster.mu.Unlock()
	}
	if !ok {
		n.stats.rejectedAnswers.Add(1)
		return
	}
	n.merge(recs, false)
}

// answerAllowedLocked takes an answer from the bounds: one per requester
// per answerEvery, and the token bucket.
func (n *Node) answerAllowedLocked(name string, now time.Time) bool {
	if last, ok := n.cluster.answered[name]; ok && now.Sub(last) < n.pt.answerEvery {
		return false
	}
	if rate := answerRate(int(n.numAlive.Load())); !n.cluster.answerLimit.take(now, rate, 2*rate) {
		return false
	}
	if len(n.cluster.answered) >= maxAnswered {
		for k, t := range n.cluster.answered {
			if now.Sub(t) >= n.pt.answerEvery {
				delete(n.cluster.answered, k)
			}
		}
		if len(n.cluster.answered) >= maxAnswered {
			return false
		}
	}
	n.cluster.answered[name] = now
	return true
}

// appendPull appends a pull request from the named node's run started at
// boot.
func appendPull(b []byte, name string, boot uint64) []byte {
	return appendNamed(b, msgPull, name, boot)
}

// decodePull decodes a pull request. Errors wrap errDecode.
func decodePull(b []byte) (name string, boot uint64, err error) { return decodeNamed(b, msgPull) }

// appendAnswer encodes records from recs into one answer message of at most
// limit bytes (at least one record), and returns it and the records left.
func appendAnswer(recs []record, limit int) (msg []byte, rest []record) {
	size, k := 5, 0
	for k < len(recs) {
		l := len(appendRecord(nil, &recs[k]))
		if k > 0 && size+l > limit {
			break
		}
		size += l
		k++
	}
	msg = appendEntries(make([]byte, 0, size), recs[:k])
	msg[0] = msgAnswer
	return msg, recs[k:]
}

// decodeAnswer decodes an answer message. Errors wrap errDecode.
func decodeAnswer(b []byte) ([]record, error) { return decodeEntriesOf(b, msgAnswer) }
