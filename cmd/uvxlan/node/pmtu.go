package node

// Path MTU measurement. A switch port with a smaller MTU than the hosts
// drops oversized datagrams silently, so without --underlay-mtu nothing
// would tell the senders behind our TAPs. The node therefore measures the
// path MTU to each alive member's VTEP itself, with padded probes (see
// encap/pmtu.go): VXLAN datagrams of a chosen size, sent with DF set from a
// socket of their own (IP_PMTUDISC_PROBE: the kernel neither fragments
// them nor refuses them on the strength of its own cached path MTU), in a
// VNI the member serves, to its TAP MAC. The member's demux recognises
// them and reports them here; this node answers each probe with a small
// ack to the prober's VTEP (its listening port, from gossip metadata: the
// probe's source port is not where it listens). Only probes addressed to
// our probe MAC (the TAP MAC in our metadata) from an alive member's VTEP
// are answered, at most pmtuAnswerBurst at once and pmtuAnswerRate a second
// per member, what a round sends; the others are counted
// (Counters.PMTUProbesRefused): unbounded, a flood of probes drew 171k
// acks in 5 s at 77% of a core. The largest acknowledged
// size is the member's path MTU: shown by `uvxlan members`, and handed to
// the engines (encap.PathMTUs), which answer frames too big for it with an
// ICMP too-big error as they do for --underlay-mtu.
//
// A round: the largest size first (the interface's MTU, the usual
// answer), then the smallest (576 for IPv4, 1280 for IPv6: no ack there
// means the member is not answering yet), then a binary search between
// them until the bounds are pmtuPrecision apart; pmtuTries probes per
// size, at most pmtuMaxProbes per round. Rounds start when a member
// appears and then every pmtuInterval, at most pmtuRounds at once; a round
// that got no ack at all is retried after pmtuRetry.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
)

const (
	pmtuInterval  = 5 * time.Minute
	pmtuRetry     = 3 * time.Second
	pmtuTick      = time.Second
	pmtuTries     = 3
	pmtuWait      = 300 * time.Millisecond
	pmtuPrecision = 1
	pmtuMaxProbes = 48
	// pmtuRounds is the most rounds under way at once.
	pmtuRounds = 4
	// pmtuAnswerRate and pmtuAnswerBurst bound the probes of one member
	// answered: a round of it sends at most pmtuMaxProbes, pmtuTries every
	// pmtuWait at most.
	pmtuAnswerRate  = int(pmtuTries * time.Second / pmtuWait)
	pmtuAnswerBurst = pmtuMaxProbes
	// pmtuRefreshMin is the least time between two refreshes of the
	// members whose probes are answered, which probes from strangers
	// cause (a flood from a stranger walks the cluster 10 times a second).
	pmtuRefreshMin = 100 * time.Millisecond
)

// pathState is what the node knows of one member VTEP's path.
type pathState struct {
	mtu     int       // largest acknowledged IP datagram; 0: unknown
	next    time.Time // when the next round is due
	running bool
}

// pmtuProber measures the path MTUs. Safe for concurrent use.
type pmtuProber struct {
	n *Node
	// members returns the cluster (the gossip node's Members; tests set
	// their own).
	members func() []gossip.Member
	conn    *net.UDPConn // opened by open
	openErr error        // why it could not be
	events  chan encap.PMTUReport
	// answered counts the acks sent; refused the probes not answered.
	answered, refused atomic.Uint64
	mu                sync.Mutex
	paths             map[netip.Addr]*pathState // by VTEP address
	// alive are the alive members by VTEP address, as due saw them last
	// (a probe does not walk the cluster), with the bucket of their probes
	// answered.
	alive map[netip.Addr]answerer
	// refreshed is when alive was made; a probe from a stranger makes it
	// again, at most every pmtuRefreshMin.
	refreshed time.Time
	waiting   map[uint64]chan int // nonce → the size acknowledged
}

func newPMTUProber(n *Node) *pmtuProber {
	return &pmtuProber{n: n, members: func() []gossip.Member { return n.gossip.Members() }, events: make(chan encap.PMTUReport, 256),
		paths: map[netip.Addr]*pathState{}, waiting: map[uint64]chan int{}}
}

// listenProbe opens the probes' socket on local, DF set and the kernel's
// path MTU cache ignored.
func listenProbe(local netip.Addr) (*net.UDPConn, error) {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)))
	if err != nil {
		return nil, err
	}
	rc, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		if local.Unmap().Is4() {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE)
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// ipOverhead is the IP and UDP headers' length towards addr.
func ipOverhead(addr netip.Addr) int {
	if addr.Unmap().Is4() {
		return 20 + 8
	}
	return 40 + 8
}

// answerer is an alive member whose probes we answer, and its bucket.
type answerer struct {
	m     gossip.Member
	limit *encap.Bucket
}

// open opens the probes' socket, before the gossip metadata is made: its
// port is one of the source ports the node announces (its probes and acks
// come from it). It reports the port, 0 when the socket could not be
// opened (run then says so, and probes nothing).
func (p *pmtuProber) open() uint16 {
	conn, err := listenProbe(p.n.cfg.Local)
	if err != nil {
		p.openErr = err
		return 0
	}
	p.conn = conn
	p.n.closers = append(p.n.closers, conn.Close)
	return uint16(conn.LocalAddr().(*net.UDPAddr).Port)
}

// run answers probes, collects acks and starts rounds until ctx is done.
func (p *pmtuProber) run(ctx context.Context) {
	conn := p.conn
	if conn == nil {
		p.n.log.Warn("path MTU probes disabled", "err", p.openErr)
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.events: // drained
			}
		}
	}
	go func() { <-ctx.Done(); conn.Close() }()
	// Acks and stray datagrams to this socket are not read: drain them.
	go func() {
		b := make([]byte, 2048)
		for {
			if _, _, err := conn.ReadFromUDPAddrPort(b); err != nil && (ctx.Err() != nil || errors.Is(err, net.ErrClosed)) {
				return
			}
		}
	}()
	tick := time.NewTicker(pmtuTick)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-p.events:
			p.handle(r)
		case <-tick.C:
			for _, m := range p.due(time.Now()) {
				wg.Add(1)
				go func() { defer wg.Done(); p.round(ctx, m) }()
			}
		}
	}
}

// handle answers a probe or delivers an ack.
func (p *pmtuProber) handle(r encap.PMTUReport) {
	switch r.Msg.Kind {
	case encap.PMTUProbe:
		m, ok := p.answerable(r)
		if !ok {
			p.refused.Add(1)
			return
		}
		size := r.Len + ipOverhead(r.From.Addr())
		if p.send(m, r.VNI, encap.PMTUMessage{Kind: encap.PMTUAck, Size: uint16(min(size, 65535)), Nonce: r.Msg.Nonce}, encap.PMTUFrameMin) {
			p.answered.Add(1)
		}
	case encap.PMTUAck:
		p.mu.Lock()
		ch := p.waiting[r.Msg.Nonce]
		p.mu.Unlock()
		if ch != nil {
			select {
			case ch <- int(r.Msg.Size):
			default:
			}
		}
	}
}

// answerable returns the alive member whose VTEP sent the probe r, if the
// probe is to be answered: addressed to our probe MAC (the TAP MAC in our
// metadata, which probers use), within the member's rate.
func (p *pmtuProber) answerable(r encap.PMTUReport) (gossip.Member, bool) {
	if len(p.n.segs) == 0 || r.Dst != p.n.segs[0].mac {
		return gossip.Member{}, false
	}
	p.mu.Lock()
	a, ok := p.alive[r.From.Addr()]
	if now := time.Now(); !ok && now.Sub(p.refreshed) >= pmtuRefreshMin {
		// A member that joined since due last looked probes at once:
		// refused, its first round would end below the path's MTU.
		p.setAnswerersLocked(p.members(), now)
		a, ok = p.alive[r.From.Addr()]
	}
	p.mu.Unlock()
	if !ok || !a.limit.Take() {
		return gossip.Member{}, false
	}
	return a.m, true
}

// segmentFor returns a VNI both this node and m serve, and our TAP MAC in it.
func (p *pmtuProber) segmentFor(m gossip.Member) (fdb.VNI, fdb.MAC, bool) {
	for _, s := range p.n.segs {
		if s.l3 {
			continue
		}
		for _, v := range m.VNIs {
			if v == s.cfg.VNI {
				return v, s.mac, true
			}
		}
	}
	return 0, fdb.MAC{}, false
}

// send sends one probe or ack to m in vni, its frame frameLen bytes long.
func (p *pmtuProber) send(m gossip.Member, vni fdb.VNI, msg encap.PMTUMessage, frameLen int) bool {
	_, src, ok := p.segmentFor(m)
	if !ok || p.conn == nil || m.MAC.IsZero() {
		return false
	}
	b := make([]byte, encap.HeaderLen+frameLen)
	encap.PutHeader(b, vni)
	encap.PutPMTUFrame(b[encap.HeaderLen:], m.MAC, src, msg)
	_, err := p.conn.WriteToUDPAddrPort(b, m.VTEP)
	return err == nil
}

// setAnswerersLocked makes the alive members the ones whose probes are
// answered, each keeping its bucket.
func (p *pmtuProber) setAnswerersLocked(members []gossip.Member, now time.Time) {
	answerers := make(map[netip.Addr]answerer, len(p.alive))
	for _, m := range members {
		if m.Self || m.State != "alive" {
			continue
		}
		if a, ok := p.alive[m.VTEP.Addr()]; ok {
			answerers[m.VTEP.Addr()] = answerer{m: m, limit: a.limit}
		} else {
			answerers[m.VTEP.Addr()] = answerer{m: m, limit: encap.NewBucket(pmtuAnswerRate, pmtuAnswerBurst)}
		}
	}
	p.alive, p.refreshed = answerers, now
}

// due returns the members whose round is due, and forgets the paths of
// members gone.
func (p *pmtuProber) due(now time.Time) []gossip.Member {
	alive := map[netip.Addr]bool{}
	var out []gossip.Member
	p.mu.Lock()
	defer p.mu.Unlock()
	running := 0
	for _, st := range p.paths {
		if st.running {
			running++
		}
	}
	members := p.members()
	p.setAnswerersLocked(members, now)
	for _, m := range members {
		if m.Self || m.State != "alive" {
			continue
		}
		if m.MAC.IsZero() || !m.VTEP.IsValid() || m.VTEP.Addr() == p.n.cfg.Local {
			continue
		}
		if _, _, ok := p.segmentFor(m); !ok {
			continue
		}
		a := m.VTEP.Addr()
		alive[a] = true
		st := p.paths[a]
		if st == nil {
			st = &pathState{}
			p.paths[a] = st
		}
		if !st.running && !now.Before(st.next) && running < pmtuRounds {
			st.running = true
			running++
			out = append(out, m)
		}
	}
	changed := false
	for a, st := range p.paths {
		if !alive[a] && !st.running {
			delete(p.paths, a)
			changed = true
		}
	}
	if changed {
		p.publishLocked()
	}
	return out
}

// publishLocked hands the known path MTUs to the engines.
func (p *pmtuProber) publishLocked() {
	m := make(map[netip.Addr]int, len(p.paths))
	for a, st := range p.paths {
		if st.mtu > 0 {
			m[a] = st.mtu
		}
	}
	p.n.pathMTUs.Set(m)
}

// get returns the path MTU towards vtep, 0 when unknown.
func (p *pmtuProber) get(vtep netip.Addr) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.paths[vtep]; st != nil {
		return st.mtu
	}
	return 0
}

// round measures the path MTU to m (see the top of the file).
func (p *pmtuProber) round(ctx context.Context, m gossip.Member) {
	vni, _, _ := p.segmentFor(m)
	a := m.VTEP.Addr()
	hi := p.n.cfg.UnderlayMTU
	if hi <= 0 {
		hi = 1500
	}
	lo := 576
	if !a.Unmap().Is4() {
		lo = 1280
	}
	lo = min(lo, hi)
	sent := 0
	// try reports whether a datagram of size bytes crossed.
	try := func(size int) bool {
		frame := size - ipOverhead(a) - encap.HeaderLen
		if frame < encap.PMTUFrameMin {
			return false
		}
		ch := make(chan int, pmtuTries)
		var nonces []uint64
		for range pmtuTries {
			if sent >= pmtuMaxProbes {
				break
			}
			var nb [8]byte
			rand.Read(nb[:])
			nonce := binary.BigEndian.Uint64(nb[:])
			p.mu.Lock()
			p.waiting[nonce] = ch
			p.mu.Unlock()
			nonces = append(nonces, nonce)
			sent++
			p.send(m, vni, encap.PMTUMessage{Kind: encap.PMTUProbe, Size: uint16(size), Nonce: nonce}, frame)
		}
		defer func() {
			p.mu.Lock()
			for _, nc := range nonces {
				delete(p.waiting, nc)
			}
			p.mu.Unlock()
		}()
		if len(nonces) == 0 {
			return false
		}
		t := time.NewTimer(pmtuWait)
		defer t.Stop()
		for {
			select {
			case got := <-ch:
				if got >= size {
					return true
				}
			case <-t.C:
				return false
			case <-ctx.Done():
				return false
			}
		}
	}
	mtu := 0
	switch {
	case try(hi):
		mtu = hi
	case try(lo):
		// lo crosses, hi does not.
		for hi-lo > pmtuPrecision && sent < pmtuMaxProbes && ctx.Err() == nil {
			mid := (lo + hi) / 2
			if try(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		mtu = lo
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.paths[a]
	if st == nil {
		st = &pathState{}
		p.paths[a] = st
	}
	st.running = false
	if mtu == 0 {
		st.next = time.Now().Add(pmtuRetry)
		return
	}
	if st.mtu != mtu {
		p.n.log.Info("path MTU measured", "subsystem", "pmtu", "member", m.Name, "vtep", a, "path_mtu", mtu, "probes", sent)
	}
	st.mtu = mtu
	st.next = time.Now().Add(pmtuInterval)
	p.publishLocked()
}
