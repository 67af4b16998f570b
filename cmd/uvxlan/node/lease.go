package node

// The subnet lease of routed mode. The node reclaims the lease of its
// previous run (<dev>.lease.json in --state-dir), saves the lease once it
// holds it and after every renewal, and removes the file when the lease is
// lost (it would be reclaimed, and lost, at every start). Routed mode's host
// networking (package routed, assembled by the command line) watches the
// leases through LeaseWatch.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"net/netip"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// savedLease is the lease file in --state-dir.
type savedLease struct {
	Network   netip.Prefix `json:"network"`
	SubnetLen int          `json:"subnet_len"`
	Subnet    netip.Prefix `json:"subnet"`
	Claimed   time.Time    `json:"claimed"`
	Expires   time.Time    `json:"expires"`
}

func (n *Node) leaseFile() string { return n.stateFile(LeaseFile(n.cfg.Segments[0].Dev)) }

// loadLease returns the lease saved by a previous run, or nil when there is
// none or it does not fit the configuration (then it says why in the log; a
// fresh subnet is leased).
func (n *Node) loadLease(lc *lease.Config) *lease.Lease {
	path := n.leaseFile()
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var s savedLease
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil {
		n.log.Warn("ignoring the saved lease: unreadable; leasing a fresh subnet", "file", path, "err", err)
		return nil
	}
	if s.Network != lc.Network || s.SubnetLen != lc.SubnetLen || !s.Subnet.IsValid() {
		n.log.Warn("ignoring the saved lease: it is for another network configuration; leasing a fresh subnet",
			"file", path, "saved_network", s.Network, "saved_subnet_len", s.SubnetLen, "network", lc.Network, "subnet_len", lc.SubnetLen)
		return nil
	}
	return &lease.Lease{Subnet: s.Subnet, Claimed: s.Claimed, Expires: s.Expires}
}

// saveLease keeps the lease in the state directory; a failure is a
// warning (the next start leases afresh).
func (n *Node) saveLease(l lease.Lease) {
	path := n.leaseFile()
	if path == "" {
		return
	}
	lc := n.cfg.Leases
	b, _ := json.MarshalIndent(savedLease{Network: lc.Network, SubnetLen: lc.SubnetLen, Subnet: l.Subnet,
		Claimed: l.Claimed, Expires: l.Expires}, "", "  ") // (a struct of plain values: cannot fail)
	n.saveState(path, "lease", append(b, '\n'))
}

// leaseConfig is the lease configuration, with the lease of the previous
// run; nil without --network.
func (n *Node) leaseConfig() *lease.Config {
	if n.cfg.Leases == nil {
		return nil
	}
	lc := *n.cfg.Leases
	lc.Prior = n.loadLease(&lc)
	return &lc
}

// keepLease saves the lease once held and after every renewal, and passes
// every change of the leases on to LeaseWatch's channel, until ctx is done.
func (n *Node) keepLease(ctx context.Context) error {
	own, err := n.leases.WaitLease(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("lease: %w", err) // gossip fails too, and Run returns its reason
	}
	n.saveLease(own)
	for {
		signal(n.leaseEvents)
		select {
		case <-ctx.Done():
			return nil
		case <-n.leases.Changes():
		}
		for _, l := range n.leases.Leases() {
			if l.Self && l.State == lease.Alive && !l.Expires.Equal(own.Expires) {
				n.saveLease(l)
				own = l
			}
		}
	}
}

// signal sends on a coalescing channel without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// LeaseWatch is what routed mode reads of the node's leases: the lease
// this node holds, every live lease, and a signal when they change (once
// the node's own lease is saved).
type LeaseWatch struct{ n *Node }

// LeaseWatch returns the node's lease watch; nil outside routed mode.
func (n *Node) LeaseWatch() *LeaseWatch {
	if n.leases == nil {
		return nil
	}
	return &LeaseWatch{n}
}

// WaitLease blocks until the node holds a settled lease.
func (w *LeaseWatch) WaitLease(ctx context.Context) (lease.Lease, error) {
	return w.n.leases.WaitLease(ctx)
}

// Changes signals (coalesced) that the leases changed.
func (w *LeaseWatch) Changes() <-chan struct{} { return w.n.leaseEvents }

// Leases returns every live lease.
func (w *LeaseWatch) Leases() []lease.Lease { return w.n.Leases() }

// SetSubnets replaces routed mode's ARP answers for remote subnets (one
// binding per node, to its TAP MAC) in the node's neighbour table.
func (n *Node) SetSubnets(answers []fdb.SubnetNeigh) error { return n.neigh.SetSubnets(answers) }
