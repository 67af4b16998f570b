package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

// The Node annotations. uvxlan's own say where the node's agent is; the
// flannel ones mean what they mean for flannel's vxlan backend (its VTEP
// address, TAP MAC and VNI), so tools that read them read them right.
const (
	AnnotationVTEP   = "uvxlan.io/vtep"        // VTEP, "IP:PORT"
	AnnotationGossip = "uvxlan.io/gossip-addr" // gossip address, "IP:PORT"
	AnnotationMAC    = "uvxlan.io/mac"         // the TAP's MAC
	AnnotationVNI    = "uvxlan.io/vni"         // the routed segment's VNI
	AnnotationReady  = "uvxlan.io/ready"       // "true" once the host forwards

	FlannelBackendType   = "flannel.alpha.coreos.com/backend-type"    // "vxlan"
	FlannelBackendData   = "flannel.alpha.coreos.com/backend-data"    // {"VNI":1,"VtepMAC":"02:..."}
	FlannelBackendV6Data = "flannel.alpha.coreos.com/backend-v6-data" // the same, with --network6
	FlannelPublicIP      = "flannel.alpha.coreos.com/public-ip"       // the VTEP's IP, on an IPv4 underlay
	FlannelPublicIPv6    = "flannel.alpha.coreos.com/public-ipv6"     // the VTEP's IP, on an IPv6 underlay
	FlannelSubnetMgr     = "flannel.alpha.coreos.com/kube-subnet-manager"
)

// Timings.
const (
	// waitLogEvery is how often a wait is logged again.
	waitLogEvery = 30 * time.Second
	// requestTimeout bounds a request but a list's page or a watch.
	requestTimeout = 10 * time.Second
	// pageTimeout bounds a page of a list (up to maxPageBytes).
	pageTimeout = time.Minute
	// retryMin and retryMax bound the wait before a failed request (a
	// patch, a list or a watch) is tried again.
	retryMin, retryMax = time.Second, 10 * time.Second
)

// Config of the subnet manager.
type Config struct {
	// Kubeconfig is the kubeconfig file (--kubeconfig); empty: the
	// in-cluster configuration (a pod's service account).
	Kubeconfig string
	// NodeName is this node's Node (--name, or NODE_NAME).
	NodeName string
	// Network is the IPv4 cluster network (--network) and Network6 the
	// IPv6 one (--network6): one of them, or both (dual stack). Every
	// podCIDR of a family lies inside its network; the podCIDRs of a
	// family without a network are ignored.
	Network, Network6 netip.Prefix
	Logger            *slog.Logger
}

// Self is what the node publishes on its Node.
type Self struct {
	VNI    fdb.VNI
	VTEP   netip.AddrPort
	MAC    fdb.MAC
	Gossip netip.AddrPort // zero: gossip is off, no seeds published
}

// Seeder takes the gossip seeds found on the other Nodes; node.Node is one.
type Seeder interface {
	SetSeeds(seeds []string) error
}

// ErrNodeDeleted is wrapped by Run's error when this node's Node was
// deleted from the API server.
var ErrNodeDeleted = errors.New("Node deleted")

// Subnets is the subnet manager of one node: it is routed mode's
// routed.Leases. Make it with New, run it with Run.
type Subnets struct {
	cfg    Config
	log    *slog.Logger
	client *client

	changes chan struct{} // to routed, coalesced

	mu       sync.Mutex
	nodes    map[string]*node  // the Nodes by name; nil before the first list
	notify   chan struct{}     // closed and replaced on every change
	ready    bool              // the host forwards
	seenSelf bool              // our Node was listed once
	deleted  bool              // and then deleted
	apiErr   error             // the last failed list or watch, nil once listed again
	logged   map[string]logged // by key: what logOnce logged last, and when
	refused  map[string]string // the Nodes whose podCIDR is refused: why (Leases)
	stats    Stats
}

type logged struct {
	text string
	at   time.Time
}

// New makes the subnet manager: it reads the kubeconfig (or the in-cluster
// configuration), but does not contact the API server yet.
func New(cfg Config) (*Subnets, error) {
	var c *client
	var err error
	if cfg.Kubeconfig != "" {
		if c, err = loadKubeconfig(cfg.Kubeconfig); err != nil {
			return nil, fmt.Errorf("kube: --kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
	} else if c, err = inCluster(); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	for _, w := range c.warnings() {
		cfg.Logger.Warn(w, "server", c.server)
	}
	return &Subnets{cfg: cfg, log: cfg.Logger, client: c, changes: make(chan struct{}, 1),
		notify: make(chan struct{}), logged: map[string]logged{}}, nil
}

// changed wakes up the waiters and routed mode.
func (s *Subnets) changed() {
	s.mu.Lock()
	close(s.notify)
	s.notify = make(chan struct{})
	s.mu.Unlock()
	select {
	case s.changes <- struct{}{}:
	default:
	}
}

// wait returns a channel closed at the next change.
func (s *Subnets) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notify
}

// logOnce logs msg at most once per waitLogEvery for key, and at once when
// what is logged under key changes.
func (s *Subnets) logOnce(level slog.Level, key, msg string, args ...any) {
	text := msg + fmt.Sprint(args...)
	now := time.Now()
	s.mu.Lock()
	last, ok := s.logged[key]
	if ok && last.text == text && now.Sub(last.at) < waitLogEvery {
		s.mu.Unlock()
		return
	}
	s.logged[key] = logged{text, now}
	s.mu.Unlock()
	s.log.Log(context.Background(), level, msg, args...)
}

// sleep waits d or until ctx is done, and reports whether ctx is not.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// watch lists the Nodes and follows their changes until ctx is done; after
// a failure it lists them again (after 1 s, doubling to 10 s while the
// failures go on). What it knew stays as it was meanwhile.
func (s *Subnets) watch(ctx context.Context) {
	backoff := retryMin
	for {
		listed, err := s.listAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		if listed {
			backoff = retryMin
		}
		if isGone(err) {
			continue // the resource version is too old: list again at once
		}
		s.watchFailed(err)
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, retryMax)
	}
}

// listAndWatch lists the Nodes into s.nodes, then applies the events of a
// watch from the list's resource version, watching again when the server
// ends one or it brings nothing for watchIdle. It returns on the first
// error; listed says the list succeeded.
func (s *Subnets) listAndWatch(ctx context.Context) (listed bool, err error) {
	nodes, rv, err := s.client.listNodes(ctx, s.ignore)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	s.nodes = nodes
	if _, ok := nodes[s.cfg.NodeName]; s.seenSelf && !ok {
		s.deleted = true // while we were not watching
	}
	s.mu.Unlock()
	s.watchOK()
	s.changed()
	for {
		w, err := s.client.watchNodes(ctx, rv)
		if err == nil {
			rv, err = s.follow(w, rv)
			w.Close()
		}
		if errors.Is(err, errWatchIdle) {
			s.logOnce(slog.LevelInfo, "idle", "the watch of the Nodes brought nothing, not even a bookmark; watching again", "for", s.client.watchIdle)
			continue
		}
		if err != nil {
			return true, err
		}
	}
}

// follow applies the events of one watch, and returns the resource version
// to watch from next; nil when the server ended the watch.
func (s *Subnets) follow(w *watchStream, rv string) (string, error) {
	for {
		var ev watchEvent
		if err := w.next(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return rv, nil
			}
			return rv, fmt.Errorf("watch of Nodes: %w", err)
		}
		if ev.Type == "ERROR" {
			e := &apiError{}
			json.Unmarshal(ev.Object, e)
			return rv, e
		}
		var n node
		if err := json.Unmarshal(ev.Object, &n); err != nil {
			return rv, fmt.Errorf("watch of Nodes: %s event: %w", ev.Type, err)
		}
		if n.Metadata.ResourceVersion != "" {
			rv = n.Metadata.ResourceVersion
		}
		name := n.Metadata.Name
		kept := n.keep()
		s.mu.Lock()
		switch ev.Type {
		case "ADDED", "MODIFIED":
			if _, ok := s.nodes[name]; !ok && len(s.nodes) >= maxNodes {
				s.mu.Unlock()
				return rv, fmt.Errorf("watch of Nodes: %w", errTooManyNodes)
			}
			if kept {
				s.nodes[name] = &n
			} else {
				delete(s.nodes, name)
			}
		case "DELETED":
			delete(s.nodes, name)
			if name == s.cfg.NodeName {
				s.deleted = true
			}
		}
		s.mu.Unlock()
		if !kept && ev.Type != "DELETED" {
			s.ignore(name, fmt.Errorf("what is read of it exceeds %d KiB", maxKeptBytes>>10))
		}
		if ev.Type != "BOOKMARK" {
			s.changed()
		}
	}
}

// ignore logs (once in a while) that a Node is ignored, and why.
func (s *Subnets) ignore(name string, err error) {
	s.logOnce(slog.LevelWarn, "node/"+name, "ignoring a Node", "node", name, "err", err)
}

// get returns a Node of the cache; listed is false before the first list.
func (s *Subnets) get(name string) (n *node, listed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodes[name], s.nodes != nil
}

// all returns the Nodes of the cache.
func (s *Subnets) all() []*node {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*node, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, n)
	}
	return out
}

// Run watches the Nodes and keeps this node's annotations, condition and
// the gossip seeds in step, until ctx is done (nil). It returns an error
// wrapping ErrNodeDeleted when this node's Node is deleted. While the API
// server cannot be reached, or refuses (RBAC), it logs why and retries;
// what it knew stays as it was.
func (s *Subnets) Run(ctx context.Context, self Self, seeder Seeder) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.watch(ctx)

	retry := time.NewTimer(0)
	defer retry.Stop()
	backoff := retryMin
	var seeds []string
	for {
		woken := s.wait()
		if own, listed := s.get(s.cfg.NodeName); listed {
			s.mu.Lock()
			deleted := s.deleted
			if own != nil {
				s.seenSelf = true
			}
			s.mu.Unlock()
			if deleted {
				return fmt.Errorf("kube: %w: Node %q was deleted from the API server; leaving the cluster", ErrNodeDeleted, s.cfg.NodeName)
			}
			if err := s.publish(ctx, own, self); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				s.logOnce(slog.LevelWarn, "publish", "cannot update this node's Node; retrying", "node", s.cfg.NodeName,
					"err", explain(err, "patch nodes and nodes/status"), "retry_in", backoff)
				retry.Reset(backoff)
				backoff = min(2*backoff, retryMax)
			} else {
				backoff = retryMin
			}
			if found := s.seeds(self); !slices.Equal(found, seeds) && seeder != nil {
				if err := seeder.SetSeeds(found); err != nil {
					s.log.Warn("bad gossip seeds on the Nodes", "err", err)
				} else {
					seeds = found
					s.log.Info("gossip seeds from the Nodes", "seeds", found)
				}
			}
		} else {
			s.waitingForAPI()
			retry.Reset(waitLogEvery)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-woken:
		case <-retry.C:
		}
	}
}

// waitingForAPI logs, once in a while, that the Nodes are not listed yet.
func (s *Subnets) waitingForAPI() {
	s.mu.Lock()
	err := s.apiErr
	s.mu.Unlock()
	if err != nil {
		s.logOnce(slog.LevelWarn, "api", "waiting for the API server to list the Nodes", "err", explain(err, "get, list and watch nodes"))
	} else {
		s.logOnce(slog.LevelInfo, "api", "waiting for the API server to list the Nodes")
	}
}

// watchFailed records (and logs) a failed list or watch of the Nodes.
func (s *Subnets) watchFailed(err error) {
	s.mu.Lock()
	s.apiErr = err
	listed := s.nodes != nil
	s.mu.Unlock()
	if listed {
		s.logOnce(slog.LevelWarn, "watch", "cannot reach the API server; retrying (the routes stay as they are)", "err", explain(err, "get, list and watch nodes"))
	}
	s.changed()
}

// watchOK records that the Nodes are listed again.
func (s *Subnets) watchOK() {
	s.mu.Lock()
	was := s.apiErr
	s.apiErr = nil
	s.mu.Unlock()
	if was != nil {
		s.log.Info("the API server answers again")
	}
}

// explain adds to a refusal by the API server what the agent needs.
func explain(err error, verbs string) error {
	switch {
	case isForbidden(err):
		return fmt.Errorf("%w (RBAC: the agent's account needs %s; see deploy/kubernetes/uvxlan.yaml's ClusterRole)", err, verbs)
	case isUnauthorized(err):
		return fmt.Errorf("%w (the credentials of the kubeconfig or service account are refused)", err)
	}
	return err
}

// Forwarding tells the manager that the host forwards for its subnet: the
// Node gets uvxlan.io/ready and NetworkUnavailable=False.
func (s *Subnets) Forwarding() {
	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()
	s.changed()
}

// annotations returns what our Node must carry.
func (s *Subnets) annotations(self Self) map[string]string {
	data, _ := json.Marshal(struct {
		VNI     fdb.VNI
		VtepMAC string
	}{self.VNI, self.MAC.String()}) // (plain values: cannot fail)
	a := map[string]string{
		AnnotationVTEP:     self.VTEP.String(),
		AnnotationMAC:      self.MAC.String(),
		AnnotationVNI:      strconv.FormatUint(uint64(self.VNI), 10),
		FlannelBackendType: "vxlan",
		FlannelSubnetMgr:   "true",
	}
	// As flannel: backend-data for the IPv4 network, backend-v6-data for
	// the IPv6 one (the same TAP serves both), and the VTEP's address as
	// public-ip or public-ipv6, by the underlay's family.
	if s.cfg.Network.IsValid() {
		a[FlannelBackendData] = string(data)
	}
	if s.cfg.Network6.IsValid() {
		a[FlannelBackendV6Data] = string(data)
	}
	if self.VTEP.Addr().Is4() {
		a[FlannelPublicIP] = self.VTEP.Addr().String()
	} else {
		a[FlannelPublicIPv6] = self.VTEP.Addr().String()
	}
	if self.Gossip.IsValid() {
		a[AnnotationGossip] = self.Gossip.String()
	}
	s.mu.Lock()
	if s.ready {
		a[AnnotationReady] = "true"
	}
	s.mu.Unlock()
	return a
}

// publish brings our Node's annotations and, once the host forwards, its
// NetworkUnavailable condition to what they must be, patching what
// differs. A missing Node (nil) is not an error: WaitLease says it waits.
func (s *Subnets) publish(ctx context.Context, n *node, self Self) error {
	if n == nil {
		return nil
	}
	s.mu.Lock()
	ready := s.ready
	s.mu.Unlock()
	want := s.annotations(self)
	diff := map[string]string{}
	for k, v := range want {
		if n.Metadata.Annotations[k] != v {
			diff[k] = v
		}
	}
	name := n.Metadata.Name
	if len(diff) > 0 {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": diff}})
		if err := s.client.patchNode(ctx, name, "", patch); err != nil {
			return fmt.Errorf("annotate Node %q: %w", name, err)
		}
		s.log.Info("annotated this node's Node", "node", name, "annotations", diff)
	}
	if !ready || networkAvailable(n) {
		return nil
	}
	now := time.Now().UTC().Format(time.RFC3339)
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]string{{
		"type": "NetworkUnavailable", "status": "False", "reason": "UvxlanIsUp",
		"message": "uvxlan forwards for this node's podCIDR", "lastTransitionTime": now, "lastHeartbeatTime": now,
	}}}})
	if err := s.client.patchNode(ctx, name, "status", patch); err != nil {
		return fmt.Errorf("set NetworkUnavailable=False on Node %q: %w", name, err)
	}
	s.log.Info("set the Node's NetworkUnavailable condition to False", "node", name)
	return nil
}

// networkAvailable reports whether n's NetworkUnavailable condition is
// False.
func networkAvailable(n *node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == "NetworkUnavailable" {
			return c.Status == "False"
		}
	}
	return false
}

// seeds returns the gossip addresses annotated on the other Nodes, sorted.
func (s *Subnets) seeds(self Self) []string {
	var out []string
	for _, n := range s.all() {
		if n.Metadata.Name == s.cfg.NodeName {
			continue
		}
		if a, err := netip.ParseAddrPort(n.Metadata.Annotations[AnnotationGossip]); err == nil && a != self.Gossip {
			out = append(out, a.String())
		}
	}
	slices.Sort(out)
	return out
}

// podCIDRs returns n's pod CIDRs (spec.podCIDRs, else spec.podCIDR): the
// first IPv4 one inside network and the first IPv6 one inside network6,
// each invalid when it has none (or when that network is not given); an
// error when it has a bad one, or one outside its network.
func podCIDRs(n *node, network, network6 netip.Prefix) (v4, v6 netip.Prefix, err error) {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			return v4, v6, fmt.Errorf("Node %q has a bad podCIDR %q", n.Metadata.Name, c)
		}
		net, flag, maxLen, dst := network, "--network", lease.MaxSubnetLen4, &v4
		if p.Addr().Is6() {
			net, flag, maxLen, dst = network6, "--network6", lease.MaxSubnetLen6, &v6
		}
		if !net.IsValid() || dst.IsValid() {
			continue // a family not routed here, or its second podCIDR
		}
		if p != p.Masked() || p.Bits() > maxLen || p.Bits() <= net.Bits() || !net.Contains(p.Addr()) {
			return v4, v6, fmt.Errorf("Node %q's podCIDR %s is outside %s %s (or not a subnet of it of /%d or shorter)", n.Metadata.Name, p, flag, net, maxLen)
		}
		*dst = p
	}
	return v4, v6, nil
}

// WaitLease blocks until this node's Node has a podCIDR of each family
// with a network (Config.Network, Network6), and returns them as this
// node's leases, IPv4 first. It logs, every half minute, what it waits
// for: the API server, the Node, its podCIDRs. A podCIDR outside its
// network is an error.
func (s *Subnets) WaitLeases(ctx context.Context) ([]lease.Lease, error) {
	tick := time.NewTicker(waitLogEvery)
	defer tick.Stop()
	for {
		woken := s.wait()
		if n, listed := s.get(s.cfg.NodeName); listed {
			switch {
			case n == nil:
				s.logOnce(slog.LevelInfo, "lease", "waiting for this node's Node to be registered", "node", s.cfg.NodeName)
			default:
				v4, v6, err := podCIDRs(n, s.cfg.Network, s.cfg.Network6)
				if err != nil {
					return nil, fmt.Errorf("kube: %w", err)
				}
				var out []lease.Lease
				var missing []string
				for _, f := range []struct {
					network, cidr netip.Prefix
					family        string
				}{{s.cfg.Network, v4, "an IPv4"}, {s.cfg.Network6, v6, "an IPv6"}} {
					switch {
					case !f.network.IsValid():
					case f.cidr.IsValid():
						out = append(out, lease.Lease{Subnet: f.cidr, Node: n.Metadata.Name, State: lease.Alive, Self: true})
					default:
						missing = append(missing, f.family)
					}
				}
				if len(missing) == 0 {
					for _, l := range out {
						s.log.Info("this node's subnet is its Node's podCIDR", "node", n.Metadata.Name, "subnet", l.Subnet)
					}
					return out, nil
				}
				what := strings.Join(missing, " and ")
				if len(out)+len(missing) == 1 { // one family routed
					what = "a"
				}
				s.logOnce(slog.LevelInfo, "lease", "waiting for this node's Node to get "+what+
					" spec.podCIDR (kube-controller-manager --allocate-node-cidrs assigns them)", "node", s.cfg.NodeName)
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-woken:
		case <-tick.C:
		}
	}
}

// WaitLease is WaitLeases' first lease (the IPv4 one unless the manager
// routes IPv6 only).
func (s *Subnets) WaitLease(ctx context.Context) (lease.Lease, error) {
	ls, err := s.WaitLeases(ctx)
	if err != nil {
		return lease.Lease{}, err
	}
	return ls[0], nil
}

// Network is the IPv4 cluster network (Config.Network), Network6 the IPv6
// one; either may be invalid.
func (s *Subnets) Network() netip.Prefix  { return s.cfg.Network }
func (s *Subnets) Network6() netip.Prefix { return s.cfg.Network6 }

// Changes signals (coalesced) that the Nodes changed.
func (s *Subnets) Changes() <-chan struct{} { return s.changes }

// Leases returns a live lease for every podCIDR of every Node inside
// --network or --network6 (one per family) with uvxlan's annotations (VTEP
// and MAC), ours included, but those refused by withoutOverlaps. The Nodes
// refused, for a bad podCIDR or an overlap, are logged and counted (Stats)
// when their refusal starts.
func (s *Subnets) Leases() []lease.Lease {
	var out []lease.Lease
	refused := map[string]string{} // by Node: why
	for _, n := range s.all() {
		v4, v6, err := podCIDRs(n, s.cfg.Network, s.cfg.Network6)
		if err != nil {
			refused[n.Metadata.Name] = err.Error()
			continue
		}
		vtep, verr := netip.ParseAddrPort(n.Metadata.Annotations[AnnotationVTEP])
		mac, merr := fdb.ParseMAC(n.Metadata.Annotations[AnnotationMAC])
		if verr != nil || merr != nil {
			continue // not (yet) a uvxlan node
		}
		for _, p := range []netip.Prefix{v4, v6} {
			if p.IsValid() {
				out = append(out, lease.Lease{Subnet: p, Node: n.Metadata.Name, VTEP: vtep, MAC: mac,
					State: lease.Alive, Self: n.Metadata.Name == s.cfg.NodeName, Claimed: n.Metadata.CreationTimestamp})
			}
		}
	}
	out, overlaps := withoutOverlaps(out)
	maps.Copy(refused, overlaps)
	s.refuse(refused)
	return out
}

// withoutOverlaps returns the leases whose subnet overlaps none kept
// before it, taking ours first, then the others by their Node's creation
// (the oldest first: every agent sees the same timestamps, so all but the
// two owners agree on the winner), then by name; and why each other is
// refused, by Node. So a Node's podCIDR never diverts the traffic of this
// node's own pods, nor that of an older Node's.
func withoutOverlaps(ls []lease.Lease) (kept []lease.Lease, refused map[string]string) {
	slices.SortFunc(ls, func(a, b lease.Lease) int {
		if a.Self != b.Self {
			if a.Self {
				return -1
			}
			return 1
		}
		if c := a.Claimed.Compare(b.Claimed); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})
	refused = map[string]string{}
	held := map[netip.Prefix]lease.Lease{}    // the subnets kept
	covered := map[netip.Prefix]lease.Lease{} // each of those and every prefix that contains it
	for _, l := range ls {
		p := l.Subnet
		other, overlaps := covered[p] // p contains a subnet kept, or is one
		for b := p.Bits(); b >= 0 && !overlaps; b-- {
			other, overlaps = held[netip.PrefixFrom(p.Addr(), b).Masked()] // p lies inside one
		}
		if overlaps {
			why := fmt.Sprintf("Node %q's podCIDR %s overlaps %s of Node %q, created earlier", l.Node, p, other.Subnet, other.Node)
			if other.Self {
				why = fmt.Sprintf("Node %q's podCIDR %s overlaps this node's %s", l.Node, p, other.Subnet)
			}
			refused[l.Node] = why
			continue
		}
		kept = append(kept, l)
		held[p] = l
		for b := p.Bits(); b >= 0; b-- {
			covered[netip.PrefixFrom(p.Addr(), b).Masked()] = l
		}
	}
	return kept, refused
}

// Stats are the subnet manager's counters, shown beside gossip's (as the
// leases' are in routed mode without Kubernetes).
type Stats struct {
	// RefusedPodCIDRs counts the Nodes' podCIDRs refused (not routed):
	// bad, outside --network, or overlapping this node's or that of a Node
	// created earlier. Once per refusal, however long it lasts.
	RefusedPodCIDRs uint64 `json:"refused_podcidrs"`
}

// Stats returns the counters.
func (s *Subnets) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// refuse takes the Nodes whose podCIDR is refused now (by name: why), and
// logs and counts those newly refused, or for another reason.
func (s *Subnets) refuse(now map[string]string) {
	s.mu.Lock()
	var started []string
	for name, why := range now {
		if s.refused[name] != why {
			s.stats.RefusedPodCIDRs++
			started = append(started, name)
		}
	}
	var ended []string
	for name := range s.refused {
		if _, ok := now[name]; !ok {
			ended = append(ended, name)
		}
	}
	s.refused = now
	s.mu.Unlock()
	slices.Sort(started)
	for _, name := range started {
		s.log.Warn("refusing a Node's podCIDR: not routed", "node", name, "err", now[name])
	}
	slices.Sort(ended)
	for _, name := range ended {
		s.log.Info("a Node's podCIDR is no longer refused (changed, or the Node is gone)", "node", name)
	}
}
