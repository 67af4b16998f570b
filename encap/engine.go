package encap

// The forwarding engine moves frames between a TAP and the underlay.
//
// Transmit (TAP → underlay), one batch at a time:
//  1. read a batch of frames from the TAP at offset Headroom;
//  2. snoop: a source MAC not yet known as ours, and the sender binding of
//     an ARP packet not yet in the neighbour table, are reported on the
//     Snoop channel (without blocking) so the node can announce them;
//  3. ARP suppression: an ARP request for an address in the neighbour table
//     is answered with a reply written back into the TAP, and not sent;
//  4. write the VXLAN header in place in front of each frame;
//  5. look up (VNI, destination MAC) in the FDB: a known unicast MAC goes to
//     its VTEP; broadcast, multicast and unknown unicast are replicated to
//     every VTEP of the VNI's flood list (head-end replication);
//  6. pick the sending socket from a hash of the inner flow, so the outer
//     UDP source port spreads flows over the underlay's ECMP paths;
//  7. one WriteBatch (sendmmsg) per socket, one TAP write for the replies.
//
// Receive (underlay → TAP), one batch at a time:
//  1. one ReadBatch (recvmmsg);
//  2. validate each datagram (header length, I flag, reserved bits, VNI,
//     inner frame length, inner source MAC): a failure is a counted drop;
//  3. learn inner source MAC → outer source VTEP when learning is on;
//  4. write the inner frames to the TAP in one Write call.
//
// Nothing here allocates, locks or logs per packet: buffers and message
// slices are allocated once before each loop, the FDB is read lock-free, and
// counters are atomics.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/tap"
)

// Headroom is the offset at which the engine reads frames from the TAP: room
// for the VXLAN header, written in place in front of the frame.
const Headroom = HeaderLen

const (
	ethHeaderLen = 14
	// maxDatagram is the receive buffer per datagram: the largest UDP
	// payload, so that jumbo underlays and oversized peers are not truncated.
	maxDatagram = 65535
)

// EngineConfig configures an Engine. VNI, MAC and Port are required.
type EngineConfig struct {
	VNI fdb.VNI
	// MAC is the TAP's own address: frames arriving from the underlay with
	// this source are loops and are dropped.
	MAC fdb.MAC
	// Local is this VTEP's underlay address; it is never sent to.
	Local netip.Addr
	// Port is the destination UDP port for VTEPs learned from the underlay
	// (their source port is a flow hash, not where they listen).
	Port uint16
	// PeerPorts overrides Port for learned VTEPs at these addresses (static
	// peers given as IP:PORT). The engine does not modify the map.
	PeerPorts map[netip.Addr]uint16
	// Learning turns source-MAC learning from received frames on.
	Learning bool
	// Neigh, when set, turns ARP suppression on: requests for its
	// addresses are answered locally.
	Neigh *fdb.Neighbors
	// Snoop, when set, receives what the engine sees behind its own TAP:
	// source MACs not yet in the FDB as ours (Local), and ARP sender
	// bindings not yet in Neigh. Sends never block; when the channel is
	// full the sighting is dropped and counted (it recurs with the next
	// frame).
	Snoop  chan<- Sighting
	Logger *slog.Logger
}

// Sighting is an endpoint seen behind this node's TAP: a MAC, and with IP
// valid, an IP → MAC binding from an ARP packet.
type Sighting struct {
	MAC fdb.MAC
	IP  netip.Addr
}

// Engine forwards frames between one TAP and the underlay for one VNI.
// Create it with NewEngine and run it with Run; Stats may be called at any
// time from any goroutine.
type Engine struct {
	cfg     EngineConfig
	dev     tap.Device
	rx      Transport
	senders []Transport
	fdb     *fdb.Table
	log     *slog.Logger
	c       counters
	// tapMu serialises TAP writes: the receive loop writes frames, the
	// transmit loop writes ARP replies.
	tapMu sync.Mutex
	// The last (source MAC, VTEP) learned in the current receive batch, so
	// that a run of datagrams of one flow is learned once. Receive loop
	// only.
	rxSrc    fdb.MAC
	rxFrom   netip.AddrPort
	rxLearnt bool
}

// NewEngine builds an engine. rx receives from the underlay; senders send to
// it, the sender for a frame chosen by a hash of its inner flow (pass rx alone
// to send from the listening port). The engine owns dev, rx and senders from
// here on: Run closes them when it returns.
func NewEngine(cfg EngineConfig, dev tap.Device, rx Transport, senders []Transport, table *fdb.Table) (*Engine, error) {
	switch {
	case !cfg.VNI.Valid():
		return nil, fmt.Errorf("encap: invalid VNI %d", cfg.VNI)
	case cfg.Port == 0:
		return nil, errors.New("encap: destination port is 0")
	case dev == nil || rx == nil || table == nil:
		return nil, errors.New("encap: engine needs a device, a transport and a table")
	case len(senders) == 0:
		return nil, errors.New("encap: engine needs at least one sender")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Engine{cfg: cfg, dev: dev, rx: rx, senders: senders, fdb: table,
		log: log.With("subsystem", "engine")}, nil
}

// Stats returns a snapshot of the counters. Safe for concurrent use.
func (e *Engine) Stats() Stats { return e.c.snapshot() }

// Run forwards in both directions until ctx is done or a loop fails, then
// closes the device and the sockets and returns. It returns nil after a
// cancellation and the first error otherwise.
func (e *Engine) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) {
		if err != nil && ctx.Err() == nil {
			errOnce.Do(func() { firstErr = err })
		}
		cancel()
	}
	wg.Add(2)
	go func() { defer wg.Done(); fail(e.transmitLoop()) }()
	go func() { defer wg.Done(); fail(e.receiveLoop()) }()

	<-ctx.Done()
	e.dev.Close()
	e.rx.Close()
	for _, s := range e.senders {
		if s != e.rx {
			s.Close()
		}
	}
	wg.Wait()
	return firstErr
}

// txBatch is the transmit loop's scratch, allocated once.
type txBatch struct {
	// out holds the datagrams to send, one list per sender; flooding
	// appends one message per VTEP, so the lists grow to the largest
	// batch seen and stay there.
	out [][]Message
	// replies are ARP replies to write back into the TAP: replies[:n]
	// point into replyBufs.
	replies   [][]byte
	replyBufs [][]byte
	// seen is the last source MAC snooped in this batch: the segments of a
	// super-frame share it, and one look per batch is enough.
	seen   fdb.MAC
	seenOK bool
}

func (e *Engine) newTxBatch(batch int) *txBatch {
	b := &txBatch{out: make([][]Message, len(e.senders)), replies: make([][]byte, 0, batch), replyBufs: make([][]byte, batch)}
	for i := range b.out {
		b.out[i] = make([]Message, 0, batch)
	}
	for i := range b.replyBufs {
		b.replyBufs[i] = make([]byte, arpFrameLen)
	}
	return b
}

func (b *txBatch) reset() {
	for i := range b.out {
		b.out[i] = b.out[i][:0]
	}
	b.replies = b.replies[:0]
	b.seenOK = false
}

// transmitLoop reads frames from the TAP and sends them to the underlay.
func (e *Engine) transmitLoop() error {
	batch := e.dev.BatchSize()
	frameCap := Headroom + e.dev.MTU() + ethHeaderLen + 4 // + a VLAN tag
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, frameCap)
	}
	sizes := make([]int, batch)
	tb := e.newTxBatch(batch)

	for {
		n, err := e.dev.Read(bufs, sizes, Headroom)
		if err != nil {
			if isClosed(err) {
				return nil
			}
			return err
		}
		tb.reset()
		for i := 0; i < n; i++ {
			e.route(bufs[i][:Headroom+sizes[i]], tb)
		}
		for i, msgs := range tb.out {
			if len(msgs) == 0 {
				continue
			}
			sent, err := e.senders[i].WriteBatch(msgs)
			for _, m := range msgs[:sent] {
				e.c.txPackets.Add(1)
				e.c.txBytes.Add(uint64(m.N - HeaderLen))
			}
			if err != nil {
				if isClosed(err) {
					return nil
				}
				e.c.drops[DropSendError].Add(uint64(len(msgs) - sent))
			}
		}
		if len(tb.replies) > 0 {
			if _, err := e.writeTAP(tb.replies, 0); err != nil && isClosed(err) {
				return nil
			}
		}
	}
}

// writeTAP writes frames (at offset) to the TAP under tapMu and returns how
// many it wrote; the frames it did not write are counted as dropped.
func (e *Engine) writeTAP(frames [][]byte, offset int) (int, error) {
	e.tapMu.Lock()
	w, err := e.dev.Write(frames, offset)
	e.tapMu.Unlock()
	if err != nil && !isClosed(err) {
		// The TAP refused one frame (too big, say); the rest of the
		// batch is dropped with it rather than retried.
		e.c.drops[DropTAPWrite].Add(uint64(len(frames) - w))
	}
	return w, err
}

// route handles one frame (pkt[Headroom:]) read from the TAP: it snoops it,
// answers it if it is a suppressible ARP request, or encapsulates it in place
// and appends the datagrams to send to tb.
func (e *Engine) route(pkt []byte, tb *txBatch) {
	frame := pkt[Headroom:]
	if len(frame) < ethHeaderLen {
		e.c.drop(DropTxShortFrame)
		return
	}
	dst := fdb.MAC(frame[0:6])
	arp, isARP := parseARP(frame)
	if src := fdb.MAC(frame[6:12]); e.cfg.Snoop != nil && (isARP || !tb.seenOK || src != tb.seen) {
		e.snoop(src, arp, isARP)
		tb.seen, tb.seenOK = src, true
	}
	if isARP && arp.op == arpRequest && e.cfg.Neigh != nil {
		if mac, ok := e.cfg.Neigh.Lookup(e.cfg.VNI, arp.targetIP); ok && len(tb.replies) < len(tb.replyBufs) {
			b := tb.replyBufs[len(tb.replies)]
			tb.replies = append(tb.replies, b[:putARPReply(b, arp, mac)])
			e.c.arpSuppressed.Add(1)
			return
		}
		if dst.IsMulticast() {
			e.c.arpFlooded.Add(1)
		}
	}

	PutHeader(pkt, e.cfg.VNI)
	s := 0
	if len(e.senders) > 1 {
		s = int(flowHash(frame) % uint32(len(e.senders)))
	}
	out := tb.out
	if !dst.IsMulticast() {
		if vtep, ok := e.fdb.Lookup(e.cfg.VNI, dst); ok {
			if vtep.Addr() != e.cfg.Local {
				out[s] = append(out[s], Message{Buf: pkt, N: len(pkt), Addr: vtep})
			}
			return
		}
	}
	flood := e.fdb.Flood(e.cfg.VNI)
	sent := false
	for _, vtep := range flood {
		if vtep.Addr() == e.cfg.Local {
			continue
		}
		out[s] = append(out[s], Message{Buf: pkt, N: len(pkt), Addr: vtep})
		sent = true
	}
	if !sent {
		e.c.drop(DropNoVTEP)
		return
	}
	e.c.floods.Add(1)
}

// snoop reports src, and the sender binding of an ARP packet, when they are
// not yet known as living behind this node, and marks known ones as seen.
func (e *Engine) snoop(src fdb.MAC, arp arpPacket, isARP bool) {
	if src.IsMulticast() || src.IsZero() {
		return
	}
	// Seen also refreshes a known local entry's last-seen time, by which
	// the node ages endpoints that went away.
	if vtep, ok := e.fdb.Seen(e.cfg.VNI, src); !ok || vtep.Addr() != e.cfg.Local {
		e.report(Sighting{MAC: src})
	}
	if !isARP || e.cfg.Neigh == nil || arp.senderIP.IsUnspecified() || arp.senderMAC != src {
		return
	}
	if mac, ok := e.cfg.Neigh.Lookup(e.cfg.VNI, arp.senderIP); !ok || mac != src {
		e.report(Sighting{MAC: src, IP: arp.senderIP})
	}
}

func (e *Engine) report(s Sighting) {
	select {
	case e.cfg.Snoop <- s:
	default:
		e.c.snoopDropped.Add(1)
	}
}

// receiveLoop reads datagrams from the underlay and writes their frames to
// the TAP, a batch of them at a time so that the TAP can coalesce a flow's
// segments into one frame (GRO). A message in which the kernel coalesced a
// run of datagrams (UDP GRO) is cut into its datagrams in place: each frame
// is a slice of the message. The frames of all the messages of a batch go
// to the TAP together, in order, so that runs cut apart by a sender become
// one frame again.
func (e *Engine) receiveLoop() error {
	batch := e.rx.BatchSize()
	msgs := make([]Message, batch)
	for i := range msgs {
		msgs[i].Buf = make([]byte, maxDatagram)
	}
	// out is what goes to the TAP in one Write: at most its batch size.
	out := make([][]byte, 0, max(e.dev.BatchSize(), 1))
	flush := func() bool {
		closed := e.deliver(out)
		out = out[:0]
		return closed
	}
	for {
		n, err := e.rx.ReadBatch(msgs)
		if err != nil {
			if isClosed(err) {
				return nil
			}
			return err
		}
		e.rxLearnt = false
		for i := 0; i < n; i++ {
			m := &msgs[i]
			if m.Seg <= 0 || m.N <= m.Seg {
				if len(out) == cap(out) && flush() {
					return nil
				}
				if e.accept(m) {
					out = append(out, m.Buf[:m.N])
				}
				continue
			}
			// A run that does not fit what is left goes in a Write of
			// its own, rather than cut in two.
			if segs := (m.N + m.Seg - 1) / m.Seg; len(out)+segs > cap(out) && flush() {
				return nil
			}
			for off := 0; off < m.N; off += m.Seg {
				if len(out) == cap(out) && flush() {
					return nil
				}
				sm := Message{Buf: m.Buf[off:min(off+m.Seg, m.N)], Addr: m.Addr}
				sm.N = len(sm.Buf)
				if e.accept(&sm) {
					out = append(out, sm.Buf)
				}
			}
		}
		if flush() {
			return nil
		}
	}
}

// deliver writes frames (datagrams: VXLAN header and frame) to the TAP and
// counts them. It reports whether the TAP is closed.
func (e *Engine) deliver(frames [][]byte) (closed bool) {
	if len(frames) == 0 {
		return false
	}
	const offset = HeaderLen
	w, err := e.writeTAP(frames, offset)
	for _, f := range frames[:w] {
		e.c.rxPackets.Add(1)
		e.c.rxBytes.Add(uint64(len(f) - offset))
	}
	return err != nil && isClosed(err)
}

// accept validates one datagram (VXLAN header + frame) and learns from it.
// It reports whether the frame goes to the TAP.
func (e *Engine) accept(m *Message) bool {
	pkt := m.Buf[:m.N]
	var h Header
	if err := h.Unmarshal(pkt); err != nil {
		switch {
		case errors.Is(err, ErrNoIFlag):
			e.c.drop(DropNoIFlag)
		case errors.Is(err, ErrReserved):
			e.c.drop(DropReservedBits)
		default:
			e.c.drop(DropShortHeader)
		}
		return false
	}
	if h.VNI != e.cfg.VNI {
		e.c.drop(DropWrongVNI)
		return false
	}
	frame := pkt[HeaderLen:]
	if len(frame) < ethHeaderLen {
		e.c.drop(DropShortFrame)
		return false
	}
	src := fdb.MAC(frame[6:12])
	switch {
	case src.IsMulticast() || src.IsZero():
		e.c.drop(DropBadSrcMAC)
		return false
	case src == e.cfg.MAC:
		e.c.drop(DropOwnMAC)
		return false
	}
	if e.cfg.Learning && (!e.rxLearnt || src != e.rxSrc || m.Addr != e.rxFrom) {
		e.learn(src, m.Addr.Addr())
		e.rxSrc, e.rxFrom, e.rxLearnt = src, m.Addr, true
	}
	return true
}

// learn records src as living behind the VTEP at addr.
func (e *Engine) learn(src fdb.MAC, addr netip.Addr) {
	port := e.cfg.Port
	if p, ok := e.cfg.PeerPorts[addr]; ok {
		port = p
	}
	switch e.fdb.Learn(e.cfg.VNI, src, netip.AddrPortFrom(addr, port)) {
	case fdb.LearnAdded:
		e.c.learned.Add(1)
	case fdb.LearnMoved:
		e.c.moved.Add(1)
	case fdb.LearnRefusedFull:
		e.c.learnFull.Add(1)
	}
}

// isClosed reports whether err says the device or socket was closed, which is
// how Run stops the loops.
func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed)
}
