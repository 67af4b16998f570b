package node

// The endpoint quota (--max-endpoints). A node tracks at most MaxEndpoints
// endpoint MACs and as many IP bindings behind its TAPs, all segments
// together (its TAP addresses count as bindings, as on the receiving side;
// its TAP MACs are not endpoints). A new one beyond the cap is refused where
// it is snooped: it never becomes a local FDB entry, is never announced, and
// is counted (Counters.EndpointsRefused) with one warning a minute. Known
// endpoints keep working, and an endpoint that ages out makes room. gossip
// enforces the same cap on what it announces and, per owner, on what it
// accepts from others (gossip.Config.MaxEndpoints, rejected_quota), so a
// MAC flood behind one node fills neither its own tables nor anyone else's.

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxEndpoints is Config.MaxEndpoints when zero; MaxMaxEndpoints is
// its largest value (gossip's bound on the records it holds).
const (
	DefaultMaxEndpoints = 4096
	MaxMaxEndpoints     = 65536
)

// Counters are the node's own counters, besides the data path's and
// gossip's.
type Counters struct {
	// EndpointsRefused counts new endpoint MACs and IP bindings behind the
	// TAPs refused because the node tracks MaxEndpoints of them already
	// (or the table is full). It counts sightings: a refused endpoint that
	// keeps sending is refused, and counted, again.
	EndpointsRefused uint64 `json:"endpoints_refused"`
	// Conflicts counts duplicate addresses: a binding of ours that another
	// node claimed, and whose endpoint still answered (probes.go).
	Conflicts uint64 `json:"conflicts"`
	// ProbeWithdrawn counts bindings withdrawn because their endpoint did
	// not answer its probes, or moved (probes.go).
	ProbeWithdrawn uint64 `json:"probe_withdrawn"`
	// PMTUProbesRefused counts path MTU probes not answered: not
	// addressed to our probe MAC, not from an alive member's VTEP, or past
	// the member's rate (pmtu.go).
	PMTUProbesRefused uint64 `json:"pmtu_probes_refused"`
	// ESPHeld counts the members that encrypt whom gossip lost while
	// their address stayed bound to their key (--encrypt, encrypt.go):
	// each is a member this node no longer hears through gossip, and to
	// which it speaks no plain VXLAN.
	ESPHeld uint64 `json:"esp_held"`
}

// endpointQuota is the node's cap on endpoints, shared by the trackers of
// its segments. It is safe for concurrent use.
type endpointQuota struct {
	max int
	log *slog.Logger

	refused atomic.Uint64

	mu       sync.Mutex
	macs     int // endpoint MACs tracked, all segments
	bindings int // IP bindings tracked, all segments
	warned   time.Time
}

func newEndpointQuota(max int, log *slog.Logger) *endpointQuota {
	return &endpointQuota{max: max, log: log}
}

// take takes one slot of *count (q.macs or q.bindings); it reports false,
// counts the refusal and warns (once a minute) when there is none.
func (q *endpointQuota) take(count *int, what string, args ...any) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if *count < q.max {
		*count++
		return true
	}
	q.refuseLocked(what, args...)
	return false
}

// refuse counts a refused endpoint and warns, once a minute.
func (q *endpointQuota) refuse(what string, args ...any) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refuseLocked(what, args...)
}

func (q *endpointQuota) refuseLocked(what string, args ...any) {
	q.refused.Add(1)
	if now := time.Now(); now.Sub(q.warned) >= time.Minute {
		q.warned = now
		q.log.Warn("endpoint quota reached: new "+what+" behind the TAP refused (--max-endpoints)",
			append(args, "max_endpoints", q.max, "refused_so_far", q.refused.Load())...)
	}
}

// give returns a slot of *count.
func (q *endpointQuota) give(count *int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	*count--
}

// counters returns the node's counters.
func (n *Node) counters() Counters {
	var c Counters
	if n.quota != nil {
		c.EndpointsRefused = n.quota.refused.Load()
	}
	c.Conflicts, c.ProbeWithdrawn = n.lifecycle.conflicts.Load(), n.lifecycle.probeWithdrawn.Load()
	if n.pmtu != nil {
		c.PMTUProbesRefused = n.pmtu.refused.Load()
	}
	if n.enc != nil {
		c.ESPHeld = n.enc.held.Load()
	}
	return c
}
