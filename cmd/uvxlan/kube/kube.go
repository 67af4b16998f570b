package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

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

	FlannelBackendType = "flannel.alpha.coreos.com/backend-type" // "vxlan"
	FlannelBackendData = "flannel.alpha.coreos.com/backend-data" // {"VNI":1,"VtepMAC":"02:..."}
	FlannelPublicIP    = "flannel.alpha.coreos.com/public-ip"    // the VTEP's IP
	FlannelSubnetMgr   = "flannel.alpha.coreos.com/kube-subnet-manager"
)

// Timings.
const (
	// waitLogEvery is how often a wait is logged again.
	waitLogEvery = 30 * time.Second
	// requestTimeout bounds a request.
	requestTimeout = 10 * time.Second
	// probeEvery is how often the API server is asked for our Node, to
	// tell an outage (and its end) in the log.
	probeEvery = 10 * time.Second
	// retryMin and retryMax bound the wait before a failed patch is tried
	// again.
	retryMin, retryMax = time.Second, 30 * time.Second
)

// Config of the subnet manager.
type Config struct {
	// Kubeconfig is the kubeconfig file (--kubeconfig); empty: the
	// in-cluster configuration (a pod's service account).
	Kubeconfig string
	// NodeName is this node's Node (--name, or NODE_NAME).
	NodeName string
	// Network is the cluster network (--network): every podCIDR lies
	// inside it.
	Network netip.Prefix
	Logger  *slog.Logger
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
	client kubernetes.Interface

	changes chan struct{} // to routed, coalesced

	mu       sync.Mutex
	cur      *watch            // the watch whose cache is read; nil before the first list
	notify   chan struct{}     // closed and replaced on every change
	ready    bool              // the host forwards
	seenSelf bool              // our Node was in the cache once
	deleted  bool              // and then deleted
	apiErr   error             // the last list/watch error, nil once synced again
	logged   map[string]logged // by key: what logOnce logged last, and when
}

type logged struct {
	text string
	at   time.Time
}

// New makes the subnet manager: it reads the kubeconfig (or the in-cluster
// configuration), but does not contact the API server yet.
func New(cfg Config) (*Subnets, error) {
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kube: --kubeconfig %s: %w", cfg.Kubeconfig, err)
		}
	} else if rc, err = rest.InClusterConfig(); err != nil {
		if errors.Is(err, rest.ErrNotInCluster) {
			return nil, errors.New("kube: --kube-subnet-mgr needs --kubeconfig, or to run in a pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set)")
		}
		return nil, fmt.Errorf("kube: in-cluster configuration: %w", err)
	}
	rc.UserAgent = "uvxlan"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	return NewWithClient(cfg, client), nil
}

// NewWithClient makes the subnet manager over client.
func NewWithClient(cfg Config, client kubernetes.Interface) *Subnets {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Subnets{cfg: cfg, log: cfg.Logger, client: client, changes: make(chan struct{}, 1),
		notify: make(chan struct{}), logged: map[string]logged{}}
	return s
}

// watch is one informer on the Nodes.
type watch struct {
	lister listers.NodeLister
	synced cache.InformerSynced
	cancel context.CancelFunc
}

// startWatch starts an informer on the Nodes; once it has listed them it
// becomes the current one (the one before it is stopped then, so that the
// routes never come from an empty cache), until ctx is done.
func (s *Subnets) startWatch(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(s.client, 0)
	nodes := factory.Core().V1().Nodes()
	inf := nodes.Informer()
	w := &watch{lister: nodes.Lister(), synced: inf.HasSynced, cancel: cancel}
	// (Both fail only once the informer runs.)
	inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) { s.watchFailed(err) })
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.watchOK(); s.changed() },
		UpdateFunc: func(any, any) { s.watchOK(); s.changed() },
		DeleteFunc: func(obj any) { s.watchOK(); s.nodeDeleted(obj); s.changed() },
	})
	// The informer stops with ctx (not waited for: a list in flight does
	// not heed it).
	factory.Start(ctx.Done())
	go func() {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return
		}
		s.mu.Lock()
		old := s.cur
		s.cur = w
		s.mu.Unlock()
		if old != nil {
			old.cancel()
		}
		s.changed()
	}()
}

// nodes returns the current watch's cache; nil before the first list.
func (s *Subnets) nodes() listers.NodeLister {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return nil
	}
	return s.cur.lister
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

// Run watches the Nodes and keeps this node's annotations, condition and
// the gossip seeds in step, until ctx is done (nil). It returns an error
// wrapping ErrNodeDeleted when this node's Node is deleted. While the API
// server cannot be reached, or refuses (RBAC), it logs why and retries;
// what it knew stays as it was.
func (s *Subnets) Run(ctx context.Context, self Self, seeder Seeder) error {
	klog.SetSlogLogger(s.log.With("subsystem", "kube-client"))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.startWatch(ctx)

	retry := time.NewTimer(0)
	defer retry.Stop()
	probe := time.NewTicker(probeEvery)
	defer probe.Stop()
	backoff := retryMin
	var seeds []string
	for {
		woken := s.wait()
		if nodes := s.nodes(); nodes != nil {
			_, err := nodes.Get(s.cfg.NodeName)
			s.mu.Lock()
			deleted := s.deleted || (s.seenSelf && apierrors.IsNotFound(err)) // (a watch started again lists it no more)
			s.mu.Unlock()
			if deleted {
				return fmt.Errorf("kube: %w: Node %q was deleted from the API server; leaving the cluster", ErrNodeDeleted, s.cfg.NodeName)
			}
			if err := s.publish(ctx, nodes, self); err != nil {
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
			if found := s.seeds(nodes, self); !slices.Equal(found, seeds) && seeder != nil {
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
		case <-probe.C:
			if s.probe(ctx) {
				// client-go's watch, backing off, may take a minute more to
				// come back: a new one lists the Nodes now.
				s.startWatch(ctx)
			}
		}
	}
}

// probe asks the API server for our Node: client-go's watch retries a
// refused connection silently, so this is how an outage, and its end, are
// told (the routes stay as they were meanwhile). It reports whether the
// API server answers again after an outage, with the Nodes listed before.
func (s *Subnets) probe(ctx context.Context) (back bool) {
	pctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	_, err := s.client.CoreV1().Nodes().Get(pctx, s.cfg.NodeName, metav1.GetOptions{})
	if err != nil && apierrors.IsNotFound(err) {
		err = nil
	}
	if ctx.Err() != nil {
		return false
	}
	s.mu.Lock()
	was := s.apiErr
	s.apiErr = err
	listed := s.cur != nil
	s.mu.Unlock()
	switch {
	case err != nil && listed:
		s.logOnce(slog.LevelWarn, "watch", "cannot reach the API server; retrying (the routes stay as they are)", "err", explain(err, "get, list and watch nodes"))
	case err == nil && was != nil:
		s.log.Info("the API server answers again")
		return listed
	}
	return false
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

// watchFailed records (and logs) a failed list or watch of the Nodes;
// client-go retries it with backoff.
func (s *Subnets) watchFailed(err error) {
	s.mu.Lock()
	s.apiErr = err
	s.mu.Unlock()
	s.logOnce(slog.LevelWarn, "watch", "cannot watch the Nodes; retrying (the routes stay as they are)", "err", explain(err, "get, list and watch nodes"))
	s.changed()
}

// watchOK records that the watch delivers again.
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
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w (RBAC: the agent's account needs %s; see deploy/kubernetes/uvxlan.yaml's ClusterRole)", err, verbs)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w (the credentials of the kubeconfig or service account are refused)", err)
	}
	return err
}

// nodeDeleted notes the deletion of our own Node.
func (s *Subnets) nodeDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if n, ok := obj.(*corev1.Node); ok && n.Name == s.cfg.NodeName {
		s.mu.Lock()
		s.deleted = true
		s.mu.Unlock()
	}
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
		FlannelBackendData: string(data),
		FlannelPublicIP:    self.VTEP.Addr().String(),
		FlannelSubnetMgr:   "true",
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
// differs. A missing Node is not an error: WaitLease says it waits.
func (s *Subnets) publish(ctx context.Context, nodes listers.NodeLister, self Self) error {
	n, err := nodes.Get(s.cfg.NodeName)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.seenSelf = true
	ready := s.ready
	s.mu.Unlock()
	want := s.annotations(self)
	diff := map[string]string{}
	for k, v := range want {
		if n.Annotations[k] != v {
			diff[k] = v
		}
	}
	if len(diff) > 0 {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": diff}})
		pctx, cancel := context.WithTimeout(ctx, requestTimeout)
		_, err := s.client.CoreV1().Nodes().Patch(pctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		cancel()
		if err != nil {
			return fmt.Errorf("annotate Node %q: %w", n.Name, err)
		}
		s.log.Info("annotated this node's Node", "node", n.Name, "annotations", diff)
	}
	if !ready || networkAvailable(n) {
		return nil
	}
	now := metav1.Now()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "UvxlanIsUp",
		Message: "uvxlan forwards for this node's podCIDR", LastTransitionTime: now, LastHeartbeatTime: now,
	}}}})
	pctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	if _, err := s.client.CoreV1().Nodes().PatchStatus(pctx, n.Name, patch); err != nil {
		return fmt.Errorf("set NetworkUnavailable=False on Node %q: %w", n.Name, err)
	}
	s.log.Info("set the Node's NetworkUnavailable condition to False", "node", n.Name)
	return nil
}

// networkAvailable reports whether n's NetworkUnavailable condition is
// False.
func networkAvailable(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeNetworkUnavailable {
			return c.Status == corev1.ConditionFalse
		}
	}
	return false
}

// seeds returns the gossip addresses annotated on the other Nodes, sorted.
func (s *Subnets) seeds(nodes listers.NodeLister, self Self) []string {
	all, _ := nodes.List(labels.Everything()) // (a cache: cannot fail)
	var out []string
	for _, n := range all {
		if n.Name == s.cfg.NodeName {
			continue
		}
		if a, err := netip.ParseAddrPort(n.Annotations[AnnotationGossip]); err == nil && a != self.Gossip {
			out = append(out, a.String())
		}
	}
	slices.Sort(out)
	return out
}

// podCIDR returns n's IPv4 pod CIDR (spec.podCIDRs, else spec.podCIDR),
// invalid when it has none; an error when it has a bad one or one outside
// network.
func podCIDR(n *corev1.Node, network netip.Prefix) (netip.Prefix, error) {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("Node %q has a bad podCIDR %q", n.Name, c)
		}
		if !p.Addr().Is4() {
			continue // routed mode is IPv4-only
		}
		if p != p.Masked() || p.Bits() > 30 || p.Bits() <= network.Bits() || !network.Contains(p.Addr()) {
			return netip.Prefix{}, fmt.Errorf("Node %q's podCIDR %s is outside --network %s (or not a subnet of it of /30 or shorter)", n.Name, p, network)
		}
		return p, nil
	}
	return netip.Prefix{}, nil
}

// WaitLease blocks until this node's Node has a podCIDR, and returns it
// as this node's lease. It logs, every half minute, what it waits for: the
// API server, the Node, its podCIDR. A podCIDR outside --network is an
// error.
func (s *Subnets) WaitLease(ctx context.Context) (lease.Lease, error) {
	tick := time.NewTicker(waitLogEvery)
	defer tick.Stop()
	for {
		woken := s.wait()
		if nodes := s.nodes(); nodes != nil {
			n, err := nodes.Get(s.cfg.NodeName)
			switch {
			case apierrors.IsNotFound(err):
				s.logOnce(slog.LevelInfo, "lease", "waiting for this node's Node to be registered", "node", s.cfg.NodeName)
			case err != nil:
				return lease.Lease{}, fmt.Errorf("kube: %w", err)
			default:
				p, err := podCIDR(n, s.cfg.Network)
				if err != nil {
					return lease.Lease{}, fmt.Errorf("kube: %w", err)
				}
				if p.IsValid() {
					s.log.Info("this node's subnet is its Node's podCIDR", "node", n.Name, "subnet", p)
					return lease.Lease{Subnet: p, Node: n.Name, State: lease.Alive, Self: true}, nil
				}
				s.logOnce(slog.LevelInfo, "lease", "waiting for this node's Node to get a spec.podCIDR (kube-controller-manager --allocate-node-cidrs assigns them)", "node", s.cfg.NodeName)
			}
		}
		select {
		case <-ctx.Done():
			return lease.Lease{}, ctx.Err()
		case <-woken:
		case <-tick.C:
		}
	}
}

// Network is the cluster network (Config.Network).
func (s *Subnets) Network() netip.Prefix { return s.cfg.Network }

// Changes signals (coalesced) that the Nodes changed.
func (s *Subnets) Changes() <-chan struct{} { return s.changes }

// Leases returns a live lease for every Node with a podCIDR inside
// --network and uvxlan's annotations (VTEP and MAC), ours included.
func (s *Subnets) Leases() []lease.Lease {
	nodes := s.nodes()
	if nodes == nil {
		return nil
	}
	all, _ := nodes.List(labels.Everything()) // (a cache: cannot fail)
	var out []lease.Lease
	for _, n := range all {
		p, err := podCIDR(n, s.cfg.Network)
		if err != nil {
			s.logOnce(slog.LevelWarn, "node/"+n.Name, "ignoring a Node", "err", err)
			continue
		}
		vtep, verr := netip.ParseAddrPort(n.Annotations[AnnotationVTEP])
		mac, merr := fdb.ParseMAC(n.Annotations[AnnotationMAC])
		if !p.IsValid() || verr != nil || merr != nil {
			continue // not (yet) a uvxlan node
		}
		out = append(out, lease.Lease{Subnet: p, Node: n.Name, VTEP: vtep, MAC: mac,
			State: lease.Alive, Self: n.Name == s.cfg.NodeName, Claimed: n.CreationTimestamp.Time})
	}
	return out
}
