package lease

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/uvxlan/uvxlan/gossip"
)

// Extensions returns the leases as gossip extensions, for
// gossip.Config.Extensions: the leases (Extension), then the routes
// (routes.go). Register them with one node only.
func (l *Leases) Extensions() []gossip.Extension {
	return []gossip.Extension{extension{l}, routeExtension{l}}
}

// Extension returns the leases' own gossip extension (the first of
// Extensions).
func (l *Leases) Extension() gossip.Extension { return extension{l} }

// extension is how gossip calls the Leases: it implements gossip.Extension,
// whose hooks are kept off Leases' exported method set. The hooks take l.mu
// briefly and never wait on the network.
type extension struct{ l *Leases }

var _ gossip.Extension = extension{}

func (e extension) Type() byte {
	if e.l.v6() {
		return extType6
	}
	return extType
}

// Start takes the node's handle and reclaims the prior lease, before
// memberlist starts (see lease.go).
func (e extension) Start(h *gossip.Handle) error {
	l := e.l
	if l.h != nil {
		return errors.New("lease: the leases already serve a node")
	}
	if h.MAC().IsZero() {
		return errors.New("lease: leases need the TAP MAC (gossip config MAC)")
	}
	l.h, l.log = h, h.Logger().With("subsystem", "lease")
	if l.reclaimPrior(time.Now()) {
		l.log.Info("reclaimed the subnet of the previous run", "subnet", l.cfg.Prior.Subnet)
	}
	return nil
}

// Run acquires a lease once the node is in the cluster (unless the prior
// one was reclaimed), renews it, and drops expired records, until ctx is
// done.
func (e extension) Run(ctx context.Context) {
	l := e.l
	defer close(l.stopped)
	renew := time.NewTicker(l.renew)
	defer renew.Stop()
	gc := time.NewTicker(gcInterval)
	defer gc.Stop()
	var acquiring sync.WaitGroup
	defer acquiring.Wait()
	l.mu.Lock()
	joined := l.h.Joined()
	if l.settled {
		joined = nil // reclaimed: nothing to acquire
	}
	l.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-joined:
			joined = nil
			acquiring.Go(func() { l.acquire(ctx) })
		case <-renew.C:
			l.renewOwn(time.Now())
		case <-gc.C:
			l.gc(time.Now())
		}
	}
}

// Meta is our IPv4 network configuration: nodes must agree on it. The IPv6
// leases have none: it rides their state (see "Two families").
func (e extension) Meta() []byte {
	if e.l.v6() {
		return nil
	}
	return appendMeta(nil, e.l.subnets.network, e.l.subnets.bits)
}

// CheckMeta refuses a peer with another IPv4 network configuration, or
// none. The IPv6 leases accept every peer here (see "Two families").
func (e extension) CheckMeta(peer string, theirs []byte) error {
	if e.l.v6() {
		return nil
	}
	ours, ourLen := e.l.subnets.network, e.l.subnets.bits
	if theirs == nil {
		return networkMismatch(peer, netip.Prefix{}, 0, ours, ourLen)
	}
	network, subnetLen, err := decodeMeta(theirs, false)
	if err != nil {
		return fmt.Errorf("node %q: %w", peer, err)
	}
	if network != ours || subnetLen != ourLen {
		return networkMismatch(peer, network, subnetLen, ours, ourLen)
	}
	return nil
}

// NotifyMsg merges a broadcast lease and relays it if it was new to us.
func (e extension) NotifyMsg(b []byte) error {
	recs, err := decodeRecords(b, e.l.v6())
	if err != nil {
		return err
	}
	e.l.merge(recs, true)
	return nil
}

// LocalState is every lease record we hold, for a push/pull; the IPv6
// leases' begins with the network configuration.
func (e extension) LocalState() []byte {
	var b []byte
	if e.l.v6() {
		b = appendMeta(nil, e.l.subnets.network, e.l.subnets.bits)
	}
	e.l.mu.Lock()
	recs := e.l.recordsLocked()
	e.l.mu.Unlock()
	return appendRecords(b, recs)
}

// MergeRemoteState merges a peer's lease records. They are not broadcast
// again: the push/pulls of others carry them. The IPv6 leases of a peer
// with another network configuration are not merged (see "Two families").
func (e extension) MergeRemoteState(b []byte) error {
	l := e.l
	if l.v6() {
		if len(b) < metaLen6 {
			return fmt.Errorf("%w: IPv6 state of %d bytes", errDecode, len(b))
		}
		network, subnetLen, err := decodeMeta(b[:metaLen6], true)
		if err != nil {
			return err
		}
		if network != l.subnets.network || subnetLen != l.subnets.bits {
			l.mismatch(network, subnetLen)
			return nil
		}
		b = b[metaLen6:]
	}
	recs, err := decodeRecords(b, l.v6())
	if err != nil {
		return err
	}
	l.merge(recs, false)
	return nil
}

// NotifyMember: the member's leases are alive or down now; one that comes
// alive is seen: its pending records count (and may beat our lease, as
// across a healed partition).
func (e extension) NotifyMember(name string, alive bool) {
	if alive {
		l := e.l
		l.mu.Lock()
		l.sawLocked(name)
		l.checkOwnLocked(uint64(time.Now().UnixNano()))
		l.mu.Unlock()
	}
	e.l.changed()
}
