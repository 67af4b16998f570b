package encap

// The demultiplexer: one underlay socket, several segments. Like the
// kernel's VXLAN driver, which serves every VXLAN device bound to port 4789
// from one socket, a Demux reads one socket and hands each datagram to the
// engine of its VNI.
//
// Receive (underlay → TAPs), one batch at a time:
//  1. one ReadBatch (recvmmsg); a message in which the kernel coalesced a
//     run of datagrams (UDP GRO) is cut into its datagrams in place;
//  1a. with encryption (EngineConfig.ESP), ESP (esp.IsESP) is opened in
//     place with the SA of its source and SPI, and the VXLAN datagram in
//     it goes on; one without an SA (esp_unknown_spi), failing
//     authentication (esp_auth_failed) or replayed (esp_replay) is
//     dropped, as is plain VXLAN from a member that encrypts
//     (plain_from_encrypting_member: an address the table keys, gossip's
//     liveness of the member aside, esp.Table.Keyed): before anything is
//     read from them;
//  2. validate the VXLAN header (length, I flag, reserved bits): a failure is
//     a drop counted by the Demux, as is a VNI no engine serves (wrong_vni);
//  3. the engine of the VNI checks the source against its filter
//     (unknown_vtep, and src_port for a member's address from a port its
//     agent does not hold: see filter.go; once per run of datagrams from
//     one source address and port), validates the inner frame (length,
//     source MAC); those drops and the rx counters are the engine's (its
//     segment's); a path MTU probe or ack (pmtu.go) is reported to the
//     node and goes no further (neither learned from nor written to the
//     TAP);
//  4. the wire gets no more trust than gossip gives: a frame whose source
//     MAC gossip places behind another VTEP is dropped (foreign_mac);
//     nothing is learned from a member's datagrams (its MACs come from
//     gossip), and from the others' (static peers, VTEPs of static
//     entries, --allow-vtep) only when learning is on, at most
//     --max-endpoints behind each (fdb.Config.MaxLearned); once per run of
//     datagrams of one source MAC from one source;
//  4a. on the L3 VNI's engine (EngineConfig.Routed), a frame not
//     addressed to the router MAC is dropped (not_router_mac);
//  5. an ARP packet, NS or NA that binds an address pinned to a node to a
//     MAC that is not that node's is dropped (pinned_address, pinned.go);
//  6. the frames of the batch are collected per engine, in order, and each
//     engine's go to its TAP in one Write, so that the TAP can coalesce a
//     flow's segments into one frame again (GRO).
//
// Nothing here allocates or logs per packet; the VNI → engine map is built
// once and only read.

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/uvxlan/uvxlan/encap/esp"
	"github.com/uvxlan/uvxlan/fdb"
)

// Demux receives VXLAN from one socket for several engines, one per VNI.
// Create it with NewDemux and run it with Run; Stats may be called at any
// time from any goroutine.
type Demux struct {
	rx      Transport
	engines []*Engine
	byVNI   map[fdb.VNI]int // index into engines
	c       counters        // drops that belong to no engine
	// The last (engine, source MAC, source) checked (and learned) in the
	// current batch, and the verdict, so that a run of datagrams of one
	// flow is looked at once. Receive loop only.
	lastEng   *Engine
	lastSrc   fdb.MAC
	lastFrom  netip.AddrPort
	lastOK    bool
	lastValid bool // the fields above hold this batch's last run
	// The last (engine, source) checked against the engine's filter in
	// the current batch, and the verdict. Receive loop only.
	checkEng     *Engine
	checkFrom    netip.AddrPort
	checkOK      bool
	checkMember  bool
	checkDrop    DropReason
	checkedBatch bool
	// esp is the engines' EngineConfig.ESP; sc is Open's scratch.
	esp *esp.Table
	sc  esp.Scratch
}

// NewDemux builds a demultiplexer of rx for engines, which must serve
// distinct VNIs and have no socket of their own. Close closes rx, which
// ends Run; Run itself leaves rx open.
func NewDemux(rx Transport, engines []*Engine) (*Demux, error) {
	if rx == nil || len(engines) == 0 {
		return nil, errors.New("encap: a demultiplexer needs a socket and at least one engine")
	}
	seen := map[fdb.VNI]bool{}
	for _, e := range engines {
		if e.own != nil {
			return nil, fmt.Errorf("encap: the engine of VNI %d has its own socket", e.cfg.VNI)
		}
		if seen[e.cfg.VNI] {
			return nil, fmt.Errorf("encap: two engines for VNI %d", e.cfg.VNI)
		}
		seen[e.cfg.VNI] = true
	}
	return newDemux(rx, engines), nil
}

func newDemux(rx Transport, engines []*Engine) *Demux {
	d := &Demux{rx: rx, engines: engines, byVNI: make(map[fdb.VNI]int, len(engines)), esp: engines[0].cfg.ESP}
	for i, e := range engines {
		d.byVNI[e.cfg.VNI] = i
	}
	return d
}

// Stats returns the Demux's own counters: the drops of datagrams that
// belong to no engine (a bad header, a VNI nobody serves) and those of
// step 1a, made before the VNI is read (esp_unknown_spi, esp_auth_failed,
// esp_replay, plain_from_encrypting_member). Safe for concurrent use.
func (d *Demux) Stats() Stats { return d.c.snapshot() }

// Run receives until rx is closed or its reads stopped (Close,
// StopReading, or an engine's Run on the way out) and returns nil then, or
// the first receive error.
func (d *Demux) Run() error { return d.receiveLoop() }

// Close closes rx: Run returns.
func (d *Demux) Close() error { return d.rx.Close() }

// StopReading ends Run without closing rx, through which engines may still
// send (SharedSender): Run returns nil once it has delivered what it read.
// A transport that cannot stop its reads (one that is not a UDPConn) is
// closed instead.
func (d *Demux) StopReading() {
	if s, ok := d.rx.(interface{ StopReading() error }); ok && s.StopReading() == nil {
		return
	}
	d.rx.Close()
}

// engineOf returns the index of the engine serving vni, or -1.
func (d *Demux) engineOf(vni fdb.VNI) int {
	if len(d.engines) == 1 {
		if d.engines[0].cfg.VNI == vni {
			return 0
		}
		return -1
	}
	if i, ok := d.byVNI[vni]; ok {
		return i
	}
	return -1
}

// receiveLoop reads datagrams from the underlay and writes their frames to
// the TAPs, a batch of them at a time (see the pipeline above).
func (d *Demux) receiveLoop() error {
	batch := d.rx.BatchSize()
	msgs := make([]Message, batch)
	for i := range msgs {
		msgs[i].Buf = make([]byte, maxDatagram)
	}
	// outs[i] is what goes to engine i's TAP in one Write: at most its
	// batch size.
	outs := make([][][]byte, len(d.engines))
	for i, e := range d.engines {
		outs[i] = make([][]byte, 0, max(e.dev.BatchSize(), 1))
	}
	flush := func(i int) bool {
		closed := d.engines[i].deliver(outs[i])
		outs[i] = outs[i][:0]
		return closed
	}
	// add validates one datagram and queues its frame; it reports whether
	// a TAP turned out closed.
	add := func(m *Message) bool {
		i, dgram := d.receive(m)
		if i < 0 {
			return false
		}
		if len(outs[i]) == cap(outs[i]) && flush(i) {
			return true
		}
		outs[i] = append(outs[i], dgram)
		return false
	}
	for {
		n, err := d.rx.ReadBatch(msgs)
		if err != nil {
			if isClosed(err) {
				return nil
			}
			return err
		}
		d.lastValid, d.checkedBatch = false, false
		for i := 0; i < n; i++ {
			m := &msgs[i]
			if m.Seg <= 0 || m.N <= m.Seg {
				if add(m) {
					return nil
				}
				continue
			}
			// A run that does not fit what is left of its engine's
			// Write goes in a Write of its own, rather than cut in two.
			// (A run is one flow: its datagrams share a VNI.)
			if k := d.peekVNI(m.Buf[:m.Seg]); k >= 0 {
				if segs := (m.N + m.Seg - 1) / m.Seg; len(outs[k])+segs > cap(outs[k]) && flush(k) {
					return nil
				}
			}
			for off := 0; off < m.N; off += m.Seg {
				sm := Message{Buf: m.Buf[off:min(off+m.Seg, m.N)], Addr: m.Addr}
				sm.N = len(sm.Buf)
				if add(&sm) {
					return nil
				}
			}
		}
		for i := range outs {
			if len(outs[i]) > 0 && flush(i) {
				return nil
			}
		}
	}
}

// peekVNI returns the engine of a datagram's VNI without counting anything,
// or -1.
func (d *Demux) peekVNI(pkt []byte) int {
	var h Header
	if h.Unmarshal(pkt) != nil {
		return -1
	}
	return d.engineOf(h.VNI)
}

// receive validates one datagram (VXLAN header + frame, or ESP around
// them), finds the engine of its VNI and lets it check and learn from the
// frame. It returns the engine's index and the VXLAN datagram (in m.Buf),
// or -1 when the datagram is dropped.
func (d *Demux) receive(m *Message) (int, []byte) {
	pkt, ok := d.open(m)
	if !ok {
		return -1, nil
	}
	return d.acceptVXLAN(m, pkt), pkt
}

// accept is receive without the datagram.
func (d *Demux) accept(m *Message) int {
	i, _ := d.receive(m)
	return i
}

// open returns the VXLAN datagram of m: m's bytes, or for ESP, what
// they decrypt to in place; it counts and reports the drops of step 1a.
func (d *Demux) open(m *Message) ([]byte, bool) {
	pkt := m.Buf[:m.N]
	if d.esp == nil {
		return pkt, true
	}
	from := m.Addr.Addr()
	if !esp.IsESP(pkt) {
		if _, member := d.esp.Lookup(from); member {
			d.c.drop(DropPlainFromMember)
			return nil, false
		}
		return pkt, true
	}
	sa := d.esp.Inbound(from, esp.SPIOf(pkt))
	if sa == nil {
		d.c.drop(DropESPUnknownSPI)
		return nil, false
	}
	inner, res := sa.Open(pkt, &d.sc)
	switch res {
	case esp.OK:
		return inner, true
	case esp.Replayed:
		d.c.drop(DropESPReplay)
	default:
		d.c.drop(DropESPAuth)
	}
	return nil, false
}

// acceptVXLAN is accept's rest, on the VXLAN datagram pkt of m.
func (d *Demux) acceptVXLAN(m *Message, pkt []byte) int {
	var h Header
	if err := h.Unmarshal(pkt); err != nil {
		switch {
		case errors.Is(err, ErrNoIFlag):
			d.c.drop(DropNoIFlag)
		case errors.Is(err, ErrReserved):
			d.c.drop(DropReservedBits)
		default:
			d.c.drop(DropShortHeader)
		}
		return -1
	}
	i := d.engineOf(h.VNI)
	if i < 0 {
		d.c.drop(DropWrongVNI)
		return -1
	}
	e := d.engines[i]
	member, ok := d.allowed(e, m.Addr)
	if !ok {
		e.c.drop(d.checkDrop)
		return -1
	}
	frame := pkt[HeaderLen:]
	if len(frame) < ethHeaderLen {
		e.c.drop(DropShortFrame)
		return -1
	}
	if frame[12] == EtherTypePMTU>>8 && frame[13] == EtherTypePMTU&0xff {
		if msg, ok := ParsePMTUFrame(frame); ok {
			e.pmtu(msg, h.VNI, fdb.MAC(frame[0:6]), m.Addr, len(pkt))
			return -1
		}
	}
	src := fdb.MAC(frame[6:12])
	switch {
	case src.IsMulticast() || src.IsZero():
		e.c.drop(DropBadSrcMAC)
		return -1
	case src == e.cfg.MAC:
		e.c.drop(DropOwnMAC)
		return -1
	case e.cfg.Routed && fdb.MAC(frame[0:6]) != e.cfg.MAC:
		e.c.drop(DropNotRouterMAC)
		return -1
	}
	if !d.lastValid || e != d.lastEng || src != d.lastSrc || m.Addr != d.lastFrom {
		d.lastOK = e.admitSource(src, m.Addr.Addr(), member)
		d.lastEng, d.lastSrc, d.lastFrom, d.lastValid = e, src, m.Addr, true
	}
	if !d.lastOK {
		e.c.drop(DropForeignMAC)
		return -1
	}
	if et := uint16(frame[12])<<8 | uint16(frame[13]); e.cfg.Pinned != nil && (et == etherTypeARP || et == etherTypeIPv6) { // only ARP and ND bind
		if ip, mac, ok := rxBinding(frame); ok && !e.cfg.Pinned.binds(h.VNI, ip, mac) {
			e.c.drop(DropPinnedAddr)
			return -1
		}
	}
	return i
}

// admitSource decides on a run of frames with source MAC src from the VTEP
// at addr (a member's, or not): a MAC that gossip places behind another
// VTEP is refused; otherwise, when learning is on and addr is no member's,
// src is learned behind addr.
func (e *Engine) admitSource(src fdb.MAC, addr netip.Addr, member bool) bool {
	if vtep, origin, ok := e.fdb.LookupOrigin(e.cfg.VNI, src); ok && origin == fdb.OriginGossip && vtep.Addr() != addr {
		return false
	}
	if e.cfg.Learning && !member {
		e.learn(src, addr)
	}
	return true
}

// pmtu counts a path MTU probe or ack and reports it to the node, without
// blocking.
func (e *Engine) pmtu(msg PMTUMessage, vni fdb.VNI, dst fdb.MAC, from netip.AddrPort, n int) {
	if msg.Kind == PMTUProbe {
		e.c.add(PMTUProbes, 1)
	} else {
		e.c.add(PMTUAcks, 1)
	}
	if e.cfg.PMTU == nil {
		return
	}
	select {
	case e.cfg.PMTU <- PMTUReport{VNI: vni, From: from, Dst: dst, Len: n, Msg: msg}:
	default:
	}
}

// allowed reports whether e's filter lets datagrams from `from` in (when
// not, d.checkDrop says why), and whether they come from a member. The
// verdict is kept for the rest of the batch: a run of datagrams from one
// source is checked once, and a flood list or member set that changes is
// seen by the next batch.
func (d *Demux) allowed(e *Engine, from netip.AddrPort) (member, ok bool) {
	if d.checkedBatch && e == d.checkEng && from == d.checkFrom {
		return d.checkMember, d.checkOK
	}
	var drop DropReason
	member, drop, ok = e.cfg.Filter.check(from, e.fdb.Flood(e.cfg.VNI))
	d.checkEng, d.checkFrom, d.checkOK, d.checkMember, d.checkDrop, d.checkedBatch = e, from, ok, member, drop, true
	if ok && e.cfg.Heard != nil {
		e.cfg.Heard.stamp(from.Addr(), time.Now().UnixNano())
	}
	return member, ok
}

// deliver writes frames (datagrams: VXLAN header and frame) to the TAP and
// counts them. It reports whether the TAP is closed.
func (e *Engine) deliver(frames [][]byte) (closed bool) {
	if len(frames) == 0 {
		return false
	}
	const offset = HeaderLen
	w, err := e.writeTAP(frames, offset)
	var bytes uint64
	for _, f := range frames[:w] {
		bytes += uint64(len(f) - offset)
	}
	e.c.add(RxPackets, uint64(w))
	e.c.add(RxBytes, bytes)
	return err != nil && isClosed(err)
}
