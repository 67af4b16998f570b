package node

// The subnet leases of routed mode, of one family or both (--network,
// --network6). The node reclaims the leases of its previous run
// (<dev>.lease.json and <dev>.lease6.json in --state-dir), saves each lease
// once it holds it and after every renewal, and removes a lease's file when
// the lease is lost (it would be reclaimed, and lost, at every start).
// Routed mode's host networking (package routed, assembled by the command
// line) watches the leases through LeaseWatch.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"net/netip"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// savedLease is a lease file in --state-dir.
type savedLease struct {
	Network   netip.Prefix `json:"network"`
	SubnetLen int          `json:"subnet_len"`
	Subnet    netip.Prefix `json:"subnet"`
	Claimed   time.Time    `json:"claimed"`
	Expires   time.Time    `json:"expires"`
}

// family is the leases of one family: their configuration (with the
// prior lease), the leases, and their file.
type family struct {
	cfg    *lease.Config
	leases *lease.Leases
	file   string // in the state directory; "" without one
}

// families returns the node's lease families, IPv4 first; none outside
// routed mode.
func (n *Node) families() []*family {
	var out []*family
	for _, f := range []*family{n.lease4, n.lease6} {
		if f != nil {
			out = append(out, f)
		}
	}
	return out
}

// newFamily makes the leases of lc (nil: none), reclaiming the lease saved
// in file (a name in the state directory).
func (n *Node) newFamily(lc *lease.Config, file string) (*family, error) {
	if lc == nil {
		return nil, nil
	}
	f := &family{file: n.stateFile(file)}
	c := *lc
	c.Prior = n.loadLease(f.file, &c)
	f.cfg = &c
	var err error
	if f.leases, err = lease.New(c); err != nil {
		return nil, err
	}
	return f, nil
}

// loadLease returns the lease saved by a previous run in path, or nil when
// there is none or it does not fit the configuration (then it says why in
// the log; a fresh subnet is leased).
func (n *Node) loadLease(path string, lc *lease.Config) *lease.Lease {
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

// save keeps the lease in the state directory; a failure is a warning (the
// next start leases afresh).
func (n *Node) saveLease(f *family, l lease.Lease) {
	if f.file == "" {
		return
	}
	b, _ := json.MarshalIndent(savedLease{Network: f.cfg.Network, SubnetLen: f.cfg.SubnetLen, Subnet: l.Subnet,
		Claimed: l.Claimed, Expires: l.Expires}, "", "  ") // (a struct of plain values: cannot fail)
	n.saveState(f.file, "lease", append(b, '\n'))
}

// keepLease saves a family's lease once held and after every renewal, and
// passes every change of its leases on to LeaseWatch's channel, until ctx
// is done.
func (n *Node) keepLease(ctx context.Context, f *family) error {
	own, err := f.leases.WaitLease(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("lease: %w", err) // gossip fails too, and Run returns its reason
	}
	n.saveLease(f, own)
	for {
		signal(n.leaseEvents)
		select {
		case <-ctx.Done():
			return nil
		case <-f.leases.Changes():
		}
		for _, l := range f.leases.Leases() {
			if l.Self && l.State == lease.Alive && !l.Expires.Equal(own.Expires) {
				n.saveLease(f, l)
				own = l
			}
		}
	}
}

// removeLost removes the file of a lease that was lost (lease.ErrLost): it
// would be reclaimed, and lost, at every start.
func (n *Node) removeLost() {
	for _, f := range n.families() {
		if !errors.Is(f.leases.Err(), lease.ErrLost) || f.file == "" {
			continue
		}
		if err := os.Remove(f.file); err != nil && !errors.Is(err, os.ErrNotExist) {
			n.log.Warn("could not remove the lost lease", "file", f.file, "err", err)
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

// LeaseWatch is what routed mode reads of the node's leases: the leases
// this node holds, every live lease, and a signal when they change (once
// the node's own leases are saved).
type LeaseWatch struct{ n *Node }

// LeaseWatch returns the node's lease watch; nil outside routed mode.
func (n *Node) LeaseWatch() *LeaseWatch {
	if len(n.families()) == 0 {
		return nil
	}
	return &LeaseWatch{n}
}

// WaitLeases blocks until the node holds a settled lease of every family
// it leases, and returns them, IPv4 first.
func (w *LeaseWatch) WaitLeases(ctx context.Context) ([]lease.Lease, error) {
	var out []lease.Lease
	for _, f := range w.n.families() {
		l, err := f.leases.WaitLease(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// WaitLease blocks until the node holds a settled lease of its first
// family (IPv4 unless it leases IPv6 only), and returns it.
func (w *LeaseWatch) WaitLease(ctx context.Context) (lease.Lease, error) {
	return w.n.families()[0].leases.WaitLease(ctx)
}

// Changes signals (coalesced) that the leases changed.
func (w *LeaseWatch) Changes() <-chan struct{} { return w.n.leaseEvents }

// Leases returns every live lease.
func (w *LeaseWatch) Leases() []lease.Lease { return w.n.Leases() }

// SetSubnets replaces routed mode's ARP and ND answers for remote subnets
// (one binding per node and family, to its TAP MAC) in the node's
// neighbour table.
func (n *Node) SetSubnets(answers []fdb.SubnetNeigh) error { return n.neigh.SetSubnets(answers) }

// leasesOf returns the live leases of every family, IPv4 first.
func (n *Node) leasesOf() []lease.Lease {
	var ls []lease.Lease
	for _, f := range n.families() {
		ls = append(ls, f.leases.Leases()...)
	}
	return slices.Clip(ls)
}
