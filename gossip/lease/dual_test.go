package lease

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/gossip"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// Two families: a dual-stack node runs IPv4 and IPv6 leases side by side
// (see "Two families" in lease.go).

var testNetwork6 = netip.MustParsePrefix("fd00:244::/48")

// leaseConfig6 is an IPv6 configuration with the /64 subnets
// fd00:244:0:lo::/64 to fd00:244:0:hi::/64.
func leaseConfig6(lo, hi int, prior *Lease) *Config {
	sub := func(i int) netip.Addr {
		return netip.AddrFrom16([16]byte{0xfd, 0, 0x02, 0x44, 0, 0, byte(i >> 8), byte(i)})
	}
	return &Config{Network: testNetwork6, SubnetLen: 64, Prior: prior, SubnetMin: sub(lo), SubnetMax: sub(hi)}
}

// startDual starts node i with the IPv4 leases lc and the IPv6 leases lc6
// (either may be nil).
func startDual(t *testing.T, i int, lc, lc6 *Config, seeds ...string) *testNode {
	t.Helper()
	cfg := testConfig(i, seeds...)
	var ls, ls6 *Leases
	var err error
	if lc != nil {
		if ls, err = New(*lc); err != nil {
			t.Fatalf("New(%+v): %v", *lc, err)
		}
		cfg.Extensions = append(cfg.Extensions, ls.Extensions()...)
	}
	if lc6 != nil {
		if ls6, err = New(*lc6); err != nil {
			t.Fatalf("New(%+v): %v", *lc6, err)
		}
		cfg.Extensions = append(cfg.Extensions, ls6.Extensions()...)
	}
	tn := run(t, cfg, ls)
	tn.ls6 = ls6
	return tn
}

func (tn *testNode) wait6(t *testing.T) Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := tn.ls6.WaitLease(ctx)
	if err != nil {
		t.Fatalf("%s: WaitLease (IPv6): %v", tn.name, err)
	}
	return l
}

// sees checks that every node of nodes sees every lease of want (subnet →
// owner) alive, through get (its IPv4 or IPv6 leases).
func sees(nodes []*testNode, get func(*testNode) *Leases, want map[netip.Prefix]string) func() error {
	return func() error {
		for _, n := range nodes {
			for subnet, owner := range want {
				l, ok := leaseOf(get(n), subnet)
				if !ok || l.Node != owner || l.State != Alive {
					var all []string
					for _, o := range get(n).Leases() {
						all = append(all, fmt.Sprintf("%s %s %s", o.Subnet, o.Node, o.State))
					}
					var ms []string
					for _, m := range n.Members() {
						ms = append(ms, m.Name+" "+m.State)
					}
					return fmt.Errorf("%s does not see %s of %s alive; it sees %v; members %v", n.name, subnet, owner, all, ms)
				}
			}
		}
		return nil
	}
}

// Three dual-stack nodes joining at once lease distinct subnets of both
// families, and every node sees all six; restarted one after the other with
// their prior leases, each gets both subnets back, claimed as before.
func TestDualStackLeases(t *testing.T) { inBubble(t, testDualStackLeases) }

func testDualStackLeases(t *testing.T) {
	lc := func(prior *Lease) *Config { c := leaseConfig(1, 3, 0, prior); return &c }
	nodes := []*testNode{startDual(t, 0, lc(nil), leaseConfig6(1, 3, nil))}
	for i := 1; i < 3; i++ {
		nodes = append(nodes, startDual(t, i, lc(nil), leaseConfig6(1, 3, nil), nodes[0].Addr().String()))
	}
	v4, v6 := map[netip.Prefix]string{}, map[netip.Prefix]string{}
	own4, own6 := map[string]Lease{}, map[string]Lease{}
	for _, n := range nodes {
		l4, l6 := n.wait(t), n.wait6(t)
		if o, ok := v4[l4.Subnet]; ok || !testNetwork.Contains(l4.Subnet.Addr()) {
			t.Fatalf("%s leases %s (also %q's)", n.name, l4.Subnet, o)
		}
		if o, ok := v6[l6.Subnet]; ok || !testNetwork6.Contains(l6.Subnet.Addr()) || l6.Subnet.Bits() != 64 {
			t.Fatalf("%s leases %s (also %q's)", n.name, l6.Subnet, o)
		}
		v4[l4.Subnet], v6[l6.Subnet] = n.name, n.name
		own4[n.name], own6[n.name] = l4, l6
	}
	get4 := func(n *testNode) *Leases { return n.ls }
	get6 := func(n *testNode) *Leases { return n.ls6 }
	wait.For(t, 10*time.Second, "every node sees the three IPv4 leases", sees(nodes, get4, v4))
	wait.For(t, 10*time.Second, "every node sees the three IPv6 leases", sees(nodes, get6, v6))
	for _, n := range nodes {
		for _, l := range n.ls6.Leases() {
			if !l.Subnet.Addr().Is6() {
				t.Errorf("%s: an IPv4 lease among the IPv6 ones: %+v", n.name, l)
			}
		}
	}
	t.Logf("before the restarts: IPv4 %v, IPv6 %v", v4, v6)

	for i, n := range nodes {
		// A rolling restart: the next node stops once every node lists
		// every other alive (restarted nodes stopping within a few
		// milliseconds of each other can leave one out of another's
		// member list for good: see the report of issue 37).
		wait.For(t, 10*time.Second, "every node lists the three alive", func() error {
			for _, o := range nodes {
				if k := aliveMembers(o.Node); k != len(nodes) {
					return fmt.Errorf("%s lists %d alive", o.name, k)
				}
			}
			return nil
		})
		n.stop(t)
		p4, p6 := own4[n.name], own6[n.name]
		seed := nodes[(i+1)%len(nodes)]
		nodes[i] = startDual(t, i, lc(&p4), leaseConfig6(1, 3, &p6), seed.Addr().String())
		l4, l6 := nodes[i].wait(t), nodes[i].wait6(t)
		if l4.Subnet != p4.Subnet || !l4.Claimed.Equal(p4.Claimed) || l6.Subnet != p6.Subnet || !l6.Claimed.Equal(p6.Claimed) {
			t.Fatalf("%s after its restart: %s claimed %v, %s claimed %v; want %s claimed %v, %s claimed %v",
				n.name, l4.Subnet, l4.Claimed, l6.Subnet, l6.Claimed, p4.Subnet, p4.Claimed, p6.Subnet, p6.Claimed)
		}
	}
	wait.For(t, 10*time.Second, "after the restarts, every node sees the same IPv4 leases", sees(nodes, get4, v4))
	wait.For(t, 10*time.Second, "after the restarts, every node sees the same IPv6 leases", sees(nodes, get6, v6))
	for _, l := range append(nodes[0].ls.Leases(), nodes[0].ls6.Leases()...) {
		t.Logf("after every node restarted: %s %s %s claimed %s", l.Subnet, l.Node, l.State, l.Claimed.UTC().Format(time.RFC3339Nano))
	}
}

// An IPv6-only cluster (no IPv4 leases): the nodes lease, reserve
// (Config.Subnet) and announce routes in IPv6 as in IPv4; a node that asks
// for a reserved subnet held by another fails naming it.
func TestIPv6OnlyLeases(t *testing.T) { inBubble(t, testIPv6OnlyLeases) }

func testIPv6OnlyLeases(t *testing.T) {
	hubNet := netip.MustParsePrefix("fd00:244::/64") // the network's first subnet, never handed out
	hubRoute := netip.MustParsePrefix("fd00:244:0:ffff::1/128")
	hc := leaseConfig6(1, 200, nil)
	hc.Subnet, hc.Routes = hubNet, []netip.Prefix{hubRoute}
	hub := startDual(t, 0, nil, hc)
	if l := hub.wait6(t); l.Subnet != hubNet {
		t.Fatalf("hub leases %s, want its reservation %s", l.Subnet, hubNet)
	}
	a := startDual(t, 1, nil, leaseConfig6(1, 200, nil), hub.Addr().String())
	la := a.wait6(t)
	if la.Subnet == hubNet || la.Subnet.Bits() != 64 {
		t.Fatalf("a leases %s", la.Subnet)
	}
	wait.For(t, 10*time.Second, "a routes the hub's prefix", func() error {
		if r, ok := routeOf(a.ls6, hub.name, hubRoute); !ok || r.State != Alive {
			return fmt.Errorf("a sees %+v", r)
		}
		return nil
	})
	bc := leaseConfig6(1, 200, nil)
	bc.Subnet = hubNet
	b := startDual(t, 2, nil, bc, hub.Addr().String())
	err := b.runErr(t)
	if !errors.Is(err, ErrReserved) || !strings.Contains(err.Error(), "--subnet6 "+hubNet.String()) || !strings.Contains(err.Error(), `node "n00"`) {
		t.Fatalf("b: Run = %v; want ErrReserved naming --subnet6 and the hub", err)
	}
	t.Logf("b: %v", err)
}

// A member of a release that knows only IPv4 leases (the IPv4 extensions
// only) beside dual-stack nodes: all are members of one cluster, the IPv4
// leases are the same everywhere, the old member skips the IPv6 leases and
// routes (gossip's unknown extension) with no decode error and no refusal,
// and the dual-stack nodes lease IPv6 subnets among themselves. A node
// without IPv6 leases of this release is the same.
func TestDualStackWithOldMember(t *testing.T) { inBubble(t, testDualStackWithOldMember) }

func testDualStackWithOldMember(t *testing.T) {
	route6 := netip.MustParsePrefix("fd00:244:0:ffff::1/128")
	oldLs, err := New(leaseConfig(1, 200, 0, nil))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(0)
	cfg.Extensions = oldLs.Extensions() // what an older release registers
	old := run(t, cfg, oldLs)
	old.wait(t)
	lc := leaseConfig(1, 200, 0, nil)
	lc6 := leaseConfig6(1, 200, nil)
	lc6.Routes = []netip.Prefix{route6}
	// One at a time: nodes joining one seed at the same instant of the
	// bubble's clock can leave one out of the seed's member list for good
	// (so with IPv4 leases only as well: see the report of issue 37).
	a := startDual(t, 1, &lc, lc6, old.Addr().String())
	a.wait(t)
	b := startDual(t, 2, &lc, leaseConfig6(1, 200, nil), old.Addr().String())
	b.wait(t)
	c := startDual(t, 3, &lc, nil, a.Addr().String()) // this release, IPv4 only
	nodes := []*testNode{old, a, b, c}
	v4 := map[netip.Prefix]string{}
	for _, n := range nodes {
		v4[n.wait(t).Subnet] = n.name
	}
	if len(v4) != 4 {
		t.Fatalf("IPv4 leases %v: want four subnets", v4)
	}
	la6, lb6 := a.wait6(t), b.wait6(t)
	if la6.Subnet == lb6.Subnet {
		t.Fatalf("a and b both lease %s", la6.Subnet)
	}
	wait.For(t, 10*time.Second, "every node sees the four IPv4 leases", sees(nodes, func(n *testNode) *Leases { return n.ls }, v4))
	v6 := map[netip.Prefix]string{la6.Subnet: a.name, lb6.Subnet: b.name}
	wait.For(t, 10*time.Second, "a and b see both IPv6 leases, and b a's IPv6 route", func() error {
		if err := sees([]*testNode{a, b}, func(n *testNode) *Leases { return n.ls6 }, v6)(); err != nil {
			return err
		}
		if r, ok := routeOf(b.ls6, a.name, route6); !ok || r.State != Alive {
			return fmt.Errorf("b sees a's route as %+v", r)
		}
		return nil
	})
	wait.For(t, 10*time.Second, "the old member and c skip IPv6 messages", func() error {
		for _, n := range []*testNode{old, c} {
			if n.Stats().UnknownExtension == 0 {
				return fmt.Errorf("%s skipped no IPv6 message yet", n.name)
			}
		}
		return nil
	})
	for _, n := range nodes {
		st := n.Stats()
		if st.DecodeErrors != 0 || st.RefusedNodes != 0 || aliveMembers(n.Node) != 4 {
			t.Errorf("%s: decode errors %d, refused nodes %d, alive members %d; want 0, 0, 4",
				n.name, st.DecodeErrors, st.RefusedNodes, aliveMembers(n.Node))
		}
		for _, l := range n.ls.Leases() {
			if !l.Subnet.Addr().Is4() {
				t.Errorf("%s: an IPv6 lease among the IPv4 ones: %+v", n.name, l)
			}
		}
	}
	t.Logf("IPv4 %v; IPv6 %v; old member skipped %d messages of unknown extensions", v4, v6, old.Stats().UnknownExtension)
}

// A node whose IPv6 network differs joins a dual-stack cluster: it fails
// (Run says both networks and the flags), while the cluster's node goes on
// and refuses its IPv6 leases. An IPv6-only node is refused too.
func TestLease6NetworkMismatch(t *testing.T) { inBubble(t, testLease6NetworkMismatch) }

func testLease6NetworkMismatch(t *testing.T) {
	lc := leaseConfig(1, 200, 0, nil)
	a := startDual(t, 0, &lc, leaseConfig6(1, 200, nil))
	a.wait(t)
	a.wait6(t)
	other := &Config{Network: netip.MustParsePrefix("fd00:245::/48"), SubnetLen: 64}
	b := startDual(t, 1, &lc, other, a.Addr().String())
	err := b.runErr(t)
	if !errors.Is(err, errNetworkMismatch) || !strings.Contains(err.Error(), "fd00:244::/48") || !strings.Contains(err.Error(), "fd00:245::/48") ||
		!strings.Contains(err.Error(), "--network6 and --subnet-len6") {
		t.Fatalf("b: Run = %v; want a mismatch naming both IPv6 networks", err)
	}
	t.Logf("b: %v", err)
	wait.For(t, 10*time.Second, "a refused b's IPv6 state", func() error {
		if a.ls6.Stats().Rejected == 0 {
			return errors.New("nothing rejected yet")
		}
		return nil
	})
	select {
	case err := <-a.done:
		t.Fatalf("a stopped: %v", err)
	default:
	}
	for _, l := range a.ls6.Leases() {
		if !testNetwork6.Contains(l.Subnet.Addr()) {
			t.Errorf("a holds a lease of the other network: %+v", l)
		}
	}
	// An IPv6-only node cannot join a cluster with IPv4 leases: it does
	// not run their extension.
	c := startDual(t, 2, nil, leaseConfig6(1, 200, nil), a.Addr().String())
	if err := c.runErr(t); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("runs extension %d", extType)) {
		t.Fatalf("IPv6-only node: Run = %v", err)
	}
}

// The extension types: IPv4's are those of releases before IPv6 leases;
// IPv6's are others, and carry no metadata.
func TestExtensionTypes(t *testing.T) {
	ls, _ := New(leaseConfig(1, 2, 0, nil))
	ls6, _ := New(*leaseConfig6(1, 2, nil))
	var got []byte
	for _, e := range append(ls.Extensions(), ls6.Extensions()...) {
		got = append(got, e.Type())
	}
	want := []byte{gossip.MinExtensionType, gossip.MinExtensionType + 1, gossip.MinExtensionType + 4, gossip.MinExtensionType + 5}
	if string(got) != string(want) {
		t.Errorf("types %v, want %v", got, want)
	}
	if m := ls6.Extension().Meta(); m != nil {
		t.Errorf("IPv6 leases' metadata %x, want none", m)
	}
	if err := ls6.Extension().CheckMeta("old", nil); err != nil {
		t.Errorf("IPv6 leases refuse a node without them: %v", err)
	}
}

// Stats.Add sums every counter (the node shows both families' together).
func TestStatsAdd(t *testing.T) {
	var a, b Stats
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := range va.NumField() {
		va.Field(i).SetUint(uint64(i + 1))
		vb.Field(i).SetUint(100)
	}
	sum := reflect.ValueOf(a.Add(b))
	for i := range sum.NumField() {
		if got := sum.Field(i).Uint(); got != uint64(i+101) {
			t.Errorf("%s: %d, want %d", sum.Type().Field(i).Name, got, i+101)
		}
	}
}
