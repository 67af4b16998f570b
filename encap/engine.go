package encap

// The forwarding engine moves frames between a TAP and the underlay.
//
// Transmit (TAP → underlay), one batch at a time:
//  1. read a batch of frames from the TAP at offset Headroom; from a TAP
//     with offloads (a tap.Poller) the segments of a super-frame come as
//     their headers plus a tail, the payload left in the TAP's read buffer
//     and sent from there (Message.Tail): no payload is copied;
//  2. an ARP packet whose sender, an NS whose source or an NA whose target
//     claims an address pinned to another node (EngineConfig.Pinned) is
//     dropped and reported, nothing more;
//  3. snoop: a source MAC not yet known as ours, and the binding an ARP
//     packet (sender), an NS (source, with its link-layer option) or an NA
//     (target) gives its source MAC, when not yet in the neighbour table,
//     are reported on the Snoop channel (without blocking) so the node can
//     announce them;
//  4. ARP and ND suppression: an ARP request, or a multicast Neighbor
//     Solicitation (not DAD), for an address in the neighbour table is
//     answered with a reply or advertisement written back into the TAP,
//     and not sent; announcements (gratuitous ARP, ARP probes, DAD,
//     unsolicited NAs) are never answered: they are flooded, so that
//     remote kernels update their caches; frames to the probe MAC are
//     answers to the node's liveness probes or BFD control packets
//     (handed to the node on a channel, see bfd.go), consumed; requests
//     for the BFD source address are answered with the probe MAC;
//  5. a frame whose datagram would not fit the underlay MTU
//     (EngineConfig.UnderlayMTU), when it is IPv4 with DF set or IPv6, is
//     dropped and its sender told with an ICMP too-big error written back
//     into the TAP (toobig.go);
//  6. write the VXLAN header in place in front of each frame;
//  7. look up (VNI, destination MAC) in the FDB: a known unicast MAC goes to
//     its VTEP; broadcast, multicast and unknown unicast take a token from
//     the segment's storm-control bucket (or are dropped) and are
//     replicated to every VTEP of the VNI's flood list (head-end
//     replication); with EngineConfig.Partial, an inner TCP or UDP
//     checksum the TAP left partial stays so for a VTEP that takes it and
//     is completed for any other, and for every flooded frame
//     (partial.go);
//  8. pick the sending socket from a hash of the inner flow, so the outer
//     UDP source port spreads flows over the underlay's ECMP paths;
//  9. one WriteBatch (sendmmsg) per socket; the datagrams the socket
//     refused as too big (EMSGSIZE) are answered like those of step 5;
//  10. one TAP write for the replies.
//
// Receive (underlay → TAP), one batch at a time:
//  1. one ReadBatch (recvmmsg);
//  2. validate each datagram (header length, I flag, reserved bits, VNI,
//     source VTEP and port allowed, inner frame length, inner source MAC,
//     inner source MAC not placed elsewhere by gossip, no pinned address
//     bound to a stranger's MAC): a failure is a counted drop;
//  3. learn inner source MAC → outer source VTEP when learning is on and
//     the source is no member (see demux.go);
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
	"time"

	"github.com/uvxlan/uvxlan/encap/esp"
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

// EngineConfig configures an Engine. VNI and Port are required (NewEngine
// refuses a config without them), as are the device and table it is given.
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
	// Learning turns source-MAC learning from received frames on; it
	// never learns from a member's (Filter.SetMembers): a member's MACs
	// come from gossip. The table caps what it learns behind one VTEP
	// (fdb.Config.MaxLearned).
	Learning bool
	// Neigh, when set, turns ARP and ND suppression on: requests and
	// solicitations for its addresses are answered locally.
	Neigh *fdb.Neighbors
	// Snoop, when set, receives what the engine sees behind its own TAP:
	// source MACs not yet in the FDB as ours (Local), and ARP and ND
	// bindings not yet in Neigh. Sends never block; when the channel is
	// full the sighting is dropped and counted (it recurs with the next
	// frame).
	Snoop chan<- Sighting
	// Filter, when set, filters the underlay (see filter.go): datagrams
	// are accepted only from the VNI's flood list, the VTEPs of static
	// FDB entries and the Filter's ranges, the others are dropped as
	// unknown_vtep; a member's only from the source ports it announced
	// (src_port). nil accepts every source, as a kernel VXLAN device
	// does, and knows no members.
	Filter *Filter
	// BUM, when set, rate-limits the frames flooded from the TAP
	// (broadcast, multicast, unknown unicast; see storm.go): the engines
	// of one segment share one Bucket. nil: no limit.
	BUM *Bucket
	// Pinned, when set, holds the addresses pinned to nodes: an ARP
	// packet from behind the TAP whose sender claims one of another
	// node's, or an NS whose source or an NA whose target is one, is
	// dropped (DropPinnedAddr) and reported on Snoop with Pinned set, not
	// snooped nor flooded; one from the underlay that binds a pinned
	// address to a MAC not its node's is dropped too (see pinned.go).
	Pinned *Pinned
	// ProbeMAC, when not zero, is the source of the liveness probes the
	// node sends into the TAP (Probe): frames from the TAP to it are
	// answers, consumed here (an ARP reply is reported on Snoop with
	// Answer set) and never sent.
	ProbeMAC fdb.MAC
	// BFDAddr, when valid, is the address the node's BFD sessions speak
	// from, at ProbeMAC (see bfd.go): ARP requests and Neighbor
	// Solicitations from the TAP for it are answered with ProbeMAC, and
	// the BFD control packets to it there are handed to BFD (sends never
	// block: a full channel drops the packet, counted). Needs ProbeMAC.
	BFDAddr netip.Addr
	BFD     chan<- BFDPacket
	// UnderlayMTU, when not 0, is the MTU of the underlay path (the
	// local interface's, or --underlay-mtu): a frame from the TAP whose
	// VXLAN datagram would be longer is dropped (DropTooBig) instead of
	// sent, and its sender is told with an ICMP too-big error written
	// back into the TAP (see toobig.go). 0: unknown; only the datagrams
	// the socket refuses as too big (EMSGSIZE) are answered, with the
	// sending socket's path MTU.
	UnderlayMTU int
	// PathMTUs, when set, holds the measured path MTU of member VTEPs
	// (see pmtu.go): a unicast frame to a VTEP whose path MTU is known and
	// smaller than UnderlayMTU is treated as too big above it, as above.
	PathMTUs *PathMTUs
	// PMTU, when set, receives the path MTU probes and acks the demux
	// recognises (see pmtu.go); sends never block (a full channel loses
	// the report: probes are retried).
	PMTU chan<- PMTUReport
	// Heard, when set, records when VXLAN last arrived from the sources it
	// watches (see heard.go); the engines of a node share one.
	Heard *Heard
	// BusyPoll, when above 0, makes the transmit loop busy-poll its TAP
	// for up to this long after it finds it empty, before it parks (the
	// receiving sockets have their own setting: UDPConn.SetBusyPoll).
	BusyPoll time.Duration
	// Partial, when set, holds the VTEPs that take frames whose inner TCP
	// or UDP checksum is left partial (see partial.go): the engine then
	// has its TAP leave those checksums partial (tap.PartialReader), sends
	// such frames as they are to a VTEP of the set (counter
	// TxPartialCsum) and completes them for any other destination, and
	// for every flooded frame.
	Partial *PartialPeers
	// ESP, when set, holds the SAs of the members that encrypt
	// (--encrypt; package esp): a datagram to one of them is sealed in
	// its SA, or dropped (esp_no_key) while none is agreed, never sent
	// plain; plain VXLAN goes only to the VTEPs the Filter holds as
	// plain (static peers, --allow-vtep, static entries' VTEPs: see
	// plainAllowed), so an engine with ESP needs a Filter; the Demux opens the ESP it receives with them and drops
	// plain VXLAN from them (plain_from_encrypting_member). The others
	// (static peers, --allow-vtep) get plain VXLAN. The engines of a node
	// share one Table.
	ESP *esp.Table
	// Routed makes the engine the L3 VNI's (EVPN routing): frames from
	// the underlay reach the TAP only when addressed to MAC, the router
	// MAC (others: DropNotRouterMAC), and frames from the TAP go only to
	// the VTEP of their destination (a remote router MAC), never flooded
	// (DropNoVTEP).
	Routed bool
	Logger *slog.Logger
}

// Sighting is an endpoint seen behind this node's TAP: a MAC, and with IP
// valid, an IP → MAC binding from an ARP packet or a Neighbor Solicitation
// or Advertisement. With Pinned, the packet claimed an address pinned to
// another node and was dropped: the node warns about it, and records
// nothing.
type Sighting struct {
	MAC    fdb.MAC
	IP     netip.Addr
	Pinned bool
	// Answer: an ARP reply to a liveness probe (EngineConfig.ProbeMAC),
	// from MAC saying it holds IP.
	Answer bool
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
	own     *Demux // the demultiplexer of rx, when the engine has its own socket
	// maxFrame is the longest frame whose datagram fits
	// EngineConfig.UnderlayMTU (0: no limit); tooBig limits the too-big
	// answers.
	maxFrame int
	tooBig   *Bucket
	// tapMu serialises TAP writes: the receive loops (demultiplexers)
	// write frames, the transmit loop writes ARP and ND answers.
	tapMu sync.Mutex
	// poller is dev when it can poll (TryRead, WaitRead); tx is the
	// transmit loop's scratch.
	poller tap.Poller
	tx     *txState
	// partial: the TAP leaves checksums partial (EngineConfig.Partial).
	partial bool
}

// NewEngine builds an engine. senders send to the underlay, the sender for
// a frame chosen by a hash of its inner flow. rx, when not nil, is the
// engine's own receiving socket: the engine then serves its VNI alone on it
// (and may send from it: pass rx among senders). With rx nil the engine
// receives what a Demux shared by several engines hands it. The engine owns
// dev, rx and senders from here on: Run closes them when it returns
// (closing a socket that another engine shares is harmless: Run returns
// only when the whole agent stops).
func NewEngine(cfg EngineConfig, dev tap.Device, rx Transport, senders []Transport, table *fdb.Table) (*Engine, error) {
	switch {
	case !cfg.VNI.Valid():
		return nil, fmt.Errorf("encap: invalid VNI %d", cfg.VNI)
	case cfg.Port == 0:
		return nil, errors.New("encap: destination port is 0")
	case dev == nil || table == nil:
		return nil, errors.New("encap: engine needs a device and a table")
	case len(senders) == 0:
		return nil, errors.New("encap: engine needs at least one sender")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	e := &Engine{cfg: cfg, dev: dev, rx: rx, senders: senders, fdb: table,
		log: log.With("subsystem", "engine", "vni", cfg.VNI), tooBig: NewBucket(tooBigRate, tooBigBurst)}
	if cfg.UnderlayMTU < 0 {
		return nil, fmt.Errorf("encap: negative underlay MTU %d", cfg.UnderlayMTU)
	}
	if cfg.UnderlayMTU > 0 {
		e.maxFrame = max(cfg.UnderlayMTU-e.overhead()+ethHeaderLen, ethHeaderLen)
	}
	if rx != nil {
		e.own = newDemux(rx, []*Engine{e})
	}
	e.poller, _ = dev.(tap.Poller)
	if pr, ok := dev.(tap.PartialReader); ok && cfg.Partial != nil {
		e.partial = pr.LeavePartial()
	}
	e.tx = e.newTxState()
	return e, nil
}

// overhead is what the underlay adds to a frame: VXLAN's, and ESP's
// when the engine encrypts (for every destination: the larger wins).
func (e *Engine) overhead() int {
	if e.cfg.ESP != nil {
		return VXLANOverhead(e.cfg.Local) + esp.Overhead
	}
	return VXLANOverhead(e.cfg.Local)
}

// VNI returns the VNI the engine serves.
func (e *Engine) VNI() fdb.VNI { return e.cfg.VNI }

// Stats returns a snapshot of the counters (with those of its own receiving
// socket, if it has one). Safe for concurrent use.
func (e *Engine) Stats() Stats {
	s := e.c.snapshot()
	if e.own != nil {
		s = s.Add(e.own.Stats())
	}
	return s
}

// Run forwards until ctx is done or a loop fails, then closes the device
// and the sockets and returns. It returns nil after a cancellation and the
// first error otherwise. With its own receiving socket the engine forwards
// in both directions; without, it reads its TAP and sends, and a Demux
// delivers what arrives for its VNI.
//
// It stops without losing what a loop has read: it stops the receiving
// loop's reads (Demux.StopReading) and waits for it to write what it read
// into the TAP, then closes the TAP and waits for the transmit loop to send
// what it read, and only then closes the sockets. (Ending a blocked read,
// by a deadline or a close, takes nothing from the kernel's queues, which
// a successor may share: see node's takeover.) A Demux delivering into the
// TAP must have stopped first.
func (e *Engine) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) {
		if err != nil && ctx.Err() == nil {
			errOnce.Do(func() { firstErr = err })
		}
		cancel()
	}
	txDone, rxDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(txDone); fail(e.transmitLoop()) }()
	if e.own != nil {
		go func() { defer close(rxDone); fail(e.own.receiveLoop()) }()
	} else {
		close(rxDone)
	}

	<-ctx.Done()
	if e.own != nil {
		e.own.StopReading()
	}
	<-rxDone
	e.dev.Close()
	<-txDone
	for _, s := range e.senders {
		s.Close()
	}
	if e.rx != nil {
		e.rx.Close()
	}
	return firstErr
}

// replyLen is the size of a reply buffer: the longest answer the engine
// writes into the TAP.
const replyLen = max(arpFrameLen, naFrameLen, tooBigFrameLen)

// txBatch is the transmit loop's scratch, allocated once.
type txBatch struct {
	// out holds the datagrams to send, one list per sender; flooding
	// appends one message per VTEP, so the lists grow to the largest
	// batch seen and stay there.
	out [][]Message
	// replies are ARP replies and Neighbor Advertisements to write back
	// into the TAP: replies[:n] point into replyBufs, of replyLen bytes.
	replies   [][]byte
	replyBufs [][]byte
	// seen is the last source MAC snooped in this batch: the segments of a
	// super-frame share it, and one look per batch is enough.
	seen   fdb.MAC
	seenOK bool
	// now is the storm-control clock, read once per batch when a frame
	// is first flooded.
	now   int64
	nowOK bool
	// tooBigNow is the clock of the too-big answers' bucket, read once
	// per batch when a frame is first answered.
	tooBigNow   int64
	tooBigNowOK bool
	// seal[:nseal] are the datagrams sealed for members that encrypt
	// (EngineConfig.ESP) in this batch, each in a buffer of sealCap bytes;
	// the list grows to the most a batch needed and stays. sc is Seal's
	// scratch.
	seal    [][]byte
	nseal   int
	sealCap int
	sc      esp.Scratch
	// partVTEP takes partial checksums when partHas: the last VTEP looked
	// up in EngineConfig.Partial in this batch (partOK), which the
	// segments of a super-frame share.
	partVTEP        netip.AddrPort
	partHas, partOK bool
	// dstMAC's VTEP (dstFound: the FDB has it) and the path limit
	// towards it (pathLimit), when dstOK: the last unicast destination
	// looked up in this batch, which the segments of a super-frame share
	// (a lookup and a path MTU lookup per segment were 2-3 % of the
	// agents' samples with one TCP stream).
	dstMAC          fdb.MAC
	dstVTEP         netip.AddrPort
	dstLim          int
	dstFound, dstOK bool
	// bfd is the scratch of a BFD packet read from the TAP (bfd.go).
	bfd BFDPacket
}

func (e *Engine) newTxBatch(batch int) *txBatch {
	b := &txBatch{out: make([][]Message, len(e.senders)), replies: make([][]byte, 0, batch), replyBufs: make([][]byte, batch)}
	for i := range b.out {
		b.out[i] = make([]Message, 0, batch)
	}
	for i := range b.replyBufs {
		b.replyBufs[i] = make([]byte, replyLen)
	}
	return b
}

func (b *txBatch) reset() {
	for i := range b.out {
		b.out[i] = b.out[i][:0]
	}
	b.replies = b.replies[:0]
	b.seenOK, b.nowOK, b.tooBigNowOK, b.partOK, b.dstOK = false, false, false, false, false
	b.nseal = 0
}

// sealBuf returns a buffer for one more sealed datagram of the batch.
func (b *txBatch) sealBuf() []byte {
	if b.nseal == len(b.seal) {
		b.seal = append(b.seal, make([]byte, b.sealCap))
	}
	b.nseal++
	return b.seal[b.nseal-1]
}

// txState is the transmit loop's scratch, allocated once.
type txState struct {
	bufs  [][]byte
	sizes []int
	// tails[i], when not nil, is the payload of frame i, left where the
	// TAP read it (tap.Poller's TryRead): bufs[i] holds the headers, and
	// the datagram is sent from both without copying the payload.
	tails [][]byte
	tb    *txBatch
}

func (e *Engine) newTxState() *txState {
	batch := e.dev.BatchSize()
	frameCap := Headroom + e.dev.MTU() + ethHeaderLen + 4 // + a VLAN tag
	st := &txState{bufs: make([][]byte, batch), sizes: make([]int, batch), tails: make([][]byte, batch), tb: e.newTxBatch(batch)}
	st.tb.sealCap = esp.Headroom + frameCap + esp.Tailroom
	for i := range st.bufs {
		st.bufs[i] = make([]byte, frameCap)
	}
	return st
}

// transmitLoop reads frames from the TAP and sends them to the underlay.
// On a device that can poll (tap.Poller) it reads with TryRead, which
// hands over the payloads of a super-frame's segments without a copy
// (tails), and busy-polls when EngineConfig.BusyPoll says so; otherwise it
// blocks in Read.
func (e *Engine) transmitLoop() error {
	if e.poller == nil {
		for {
			n, err := e.dev.Read(e.tx.bufs, e.tx.sizes, Headroom) // tails stay nil
			if err != nil {
				if isClosed(err) {
					return nil
				}
				return err
			}
			if e.send(n) {
				return nil
			}
		}
	}
	var (
		spinUntil int64 // the busy-poll's deadline, 0 when not spinning
		stop      bool  // a socket or the TAP is closed
		failed    error
	)
	// try reads and sends until the TAP is drained (false: wait for it)
	// or something ends the loop (true). It runs inside WaitRead, which
	// calls it again when the TAP becomes readable.
	try := func() bool {
		for {
			n, drained, err := e.poller.TryRead(e.tx.bufs, e.tx.sizes, e.tx.tails, Headroom)
			closed := e.send(n)
			switch {
			case closed || err != nil && isClosed(err):
				stop = true
				return true
			case err != nil:
				failed = err
				return true
			case n > 0:
				spinUntil = 0
			}
			if drained && !spinWait(int64(e.cfg.BusyPoll), &spinUntil) {
				spinUntil = 0
				return false
			}
		}
	}
	for {
		err := e.poller.WaitRead(try)
		switch {
		case stop || err != nil && isClosed(err):
			return nil
		case failed != nil:
			return failed
		case err != nil:
			return err
		}
	}
}

// send routes the n frames in e.tx.bufs (read at Headroom, each followed by
// its tail) and sends them, and writes the replies they call for into the
// TAP. It reports whether a socket or the TAP turned out closed.
func (e *Engine) send(n int) (closed bool) {
	if n == 0 {
		return false
	}
	tb := e.tx.tb
	tb.reset()
	for i := 0; i < n; i++ {
		e.route(e.tx.bufs[i][:Headroom+e.tx.sizes[i]], e.tx.tails[i], tb)
	}
	for i, msgs := range tb.out {
		if len(msgs) == 0 {
			continue
		}
		sent, err := e.senders[i].WriteBatch(msgs)
		for _, m := range msgs[:sent] {
			e.c.add(TxPackets, 1)
			e.c.add(TxBytes, uint64(innerLen(&m)))
		}
		if err != nil {
			if isClosed(err) {
				return true
			}
			tooBig := e.refused(i, msgs, tb)
			e.c.drops[DropSendError].Add(uint64(len(msgs) - sent - tooBig))
		}
	}
	if len(tb.replies) > 0 {
		if _, err := e.writeTAP(tb.replies, 0); err != nil && isClosed(err) {
			return true
		}
	}
	return false
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

// route handles one frame (pkt[Headroom:], followed by tail) read from the
// TAP: it snoops it, answers it if it is a suppressible ARP request or
// Neighbor Solicitation, or encapsulates it in place and appends the
// datagrams to send to tb. A frame with a tail is a segment of a TCP or UDP
// super-frame: pkt holds its headers, which is all route looks at.
func (e *Engine) route(pkt, tail []byte, tb *txBatch) {
	frame := pkt[Headroom:]
	if len(frame) < ethHeaderLen {
		e.c.drop(DropTxShortFrame)
		return
	}
	// Parsed here, into a variable of route's own: filled through a
	// pointer, its addresses would cost write barriers (10-25 % of
	// BenchmarkEngineRoute).
	var f txFrame
	f.dst, f.src = fdb.MAC(frame[0:6]), fdb.MAC(frame[6:12])
	if f.arp, f.isARP = parseARP(frame); f.isARP {
		f.claim = f.arp.senderIP
		if f.arp.senderMAC == f.src && !f.arp.senderIP.IsUnspecified() {
			f.bind = f.arp.senderIP
		}
	} else if f.nd, f.isND = parseND(frame); f.isND {
		f.claim = f.nd.claim()
		f.bind, _ = f.nd.binding(f.src)
	}
	if e.answer(&f, frame, tail, tb) {
		return
	}
	e.forward(pkt, tail, &f, tb)
}

// txFrame is what route reads of a frame from the TAP.
type txFrame struct {
	dst, src fdb.MAC
	arp      arpPacket
	isARP    bool
	nd       ndPacket
	isND     bool
	// claim is the address the packet's sender says it holds; bind, when
	// valid, binds it to src.
	claim, bind netip.Addr
}

// answer handles what the agent itself takes or answers of a frame from
// the TAP, and reports whether it did, so the frame goes no further: a
// claim of a pinned address (dropped), an answer to the agent's probes,
// an ARP request or Neighbor Solicitation answered from the table, or
// for the BFD source address, a BFD packet (bfd.go). On the way it snoops
// the frame's source for the endpoint tracker.
func (e *Engine) answer(f *txFrame, frame, tail []byte, tb *txBatch) bool {
	if f.claim.IsValid() && e.cfg.Pinned != nil && e.cfg.Pinned.Has(e.cfg.VNI, f.claim) {
		e.c.drop(DropPinnedAddr)
		if e.cfg.Snoop != nil {
			e.report(Sighting{MAC: f.src, IP: f.claim, Pinned: true})
		}
		return true
	}
	if e.cfg.Snoop != nil && (f.isARP || f.isND || !tb.seenOK || f.src != tb.seen) {
		e.snoop(f.src, f.bind)
		tb.seen, tb.seenOK = f.src, true
	}
	arp, nd := &f.arp, &f.nd
	if f.dst == e.cfg.ProbeMAC && !f.dst.IsZero() {
		switch {
		case (f.isARP || f.isND) && e.bfdAsked(f): // unicast: the endpoint's kernel refreshing its entry
			e.answerBFDAddr(f, tb)
		case !f.isARP && !f.isND && e.cfg.BFD != nil && tail == nil:
			e.receiveBFD(frame, &tb.bfd)
		case e.cfg.Snoop == nil:
		case f.isARP && arp.op == arpReply:
			e.c.add(ProbeAnswers, 1)
			e.report(Sighting{MAC: arp.senderMAC, IP: arp.senderIP, Answer: true})
		case f.isND && nd.typ == ndAdvert && nd.flags&naSolicited != 0:
			e.c.add(ProbeAnswers, 1)
			e.report(Sighting{MAC: f.src, IP: nd.target, Answer: true})
		}
		return true
	}
	if (f.isARP || f.isND) && e.bfdAsked(f) {
		e.answerBFDAddr(f, tb)
		return true
	}
	// Neither answers for an endpoint behind this TAP (see localBinding).
	if f.isARP && arp.op == arpRequest && e.cfg.Neigh != nil && !arp.announcement() {
		if mac, ok := e.cfg.Neigh.Lookup(e.cfg.VNI, arp.targetIP); ok && !e.localBinding(arp.targetIP) && len(tb.replies) < len(tb.replyBufs) {
			b := tb.replyBufs[len(tb.replies)]
			tb.replies = append(tb.replies, b[:putARPReply(b, *arp, mac)])
			e.c.add(ARPSuppressed, 1)
			return true
		}
	}
	// ND suppression answers address resolution only: an NS to a
	// solicited-node multicast address from a real source. A DAD probe
	// (from ::) must reach whoever holds the address, so it is flooded; a
	// unicast NS is a reachability probe (RFC 4861 §7.3) that only the
	// endpoint itself may answer truthfully, and it is unicast anyway; an
	// NS for an address bound to the asker's own MAC is its own business.
	// Link-local targets are answered like any other, as the Linux VXLAN
	// driver's ND proxy does: the segment is one link, and the neighbour
	// table is keyed by it (VNI, address).
	if f.isND && nd.typ == ndSolicit && !nd.dad() && nd.dstIP.IsMulticast() && e.cfg.Neigh != nil {
		if mac, ok := e.cfg.Neigh.Lookup(e.cfg.VNI, nd.target); ok && mac != f.src && !e.localBinding(nd.target) && len(tb.replies) < len(tb.replyBufs) {
			b := tb.replyBufs[len(tb.replies)]
			tb.replies = append(tb.replies, b[:putNA(b, *nd, mac)])
			e.c.add(NDSuppressed, 1)
			return true
		}
	}
	return false
}

// localBinding reports whether ip is bound to an endpoint behind this TAP
// (origin local). A request for it from behind the TAP is on the
// endpoint's own link, and the endpoint answers for itself; an answer from
// the table would leave the TAP with the endpoint's MAC as its source, a
// bridge holding the TAP would learn that MAC on the TAP's port and send
// the endpoint's traffic into the TAP (and drop what comes out of it for
// the endpoint) until the endpoint next speaks.
func (e *Engine) localBinding(ip netip.Addr) bool {
	_, origin, ok := e.cfg.Neigh.LookupOrigin(e.cfg.VNI, ip)
	return ok && origin == fdb.OriginLocal
}

// forward puts the VXLAN header on the frame in pkt (its payload's rest
// in tail) and queues it in tb: to its destination's VTEP, or to every
// VTEP of the flood list (within the segment's BUM rate), or drops it as
// too big for the path (telling its sender) or with nowhere to go.
func (e *Engine) forward(pkt, tail []byte, f *txFrame, tb *txBatch) {
	frame := pkt[Headroom:]
	frameLen := len(frame) + len(tail)
	// A frame too big for the underlay path is dropped and its sender
	// told, when it is a packet that can be told (IPv4 with DF, IPv6:
	// see toobig.go); other ones go as before (the kernel fragments the
	// datagram where its own MTU says so).
	if e.maxFrame > 0 && frameLen > e.maxFrame && tooBigFamily(frame) != 0 {
		e.c.drop(DropTooBig)
		e.answerTooBig(frame, e.maxFrame-ethHeaderLen, tb)
		return
	}

	PutHeader(pkt, e.cfg.VNI)
	s := 0
	if len(e.senders) > 1 {
		s = int(flowHash(frame) % uint32(len(e.senders)))
	}
	if !f.dst.IsMulticast() {
		if !tb.dstOK || tb.dstMAC != f.dst {
			tb.dstMAC, tb.dstOK, tb.dstLim = f.dst, true, 0
			tb.dstVTEP, tb.dstFound = e.fdb.Lookup(e.cfg.VNI, f.dst)
			if tb.dstFound && tb.dstVTEP.Addr() != e.cfg.Local {
				tb.dstLim = e.pathLimit(tb.dstVTEP.Addr())
			}
		}
		if vtep, ok := tb.dstVTEP, tb.dstFound; ok {
			if vtep.Addr() != e.cfg.Local {
				if lim := tb.dstLim; lim > 0 && frameLen > lim && tooBigFamily(frame) != 0 {
					e.c.drop(DropTooBig)
					e.answerTooBig(frame, lim-ethHeaderLen, tb)
					return
				}
				if e.partial {
					e.finish(frame, tail, vtep, tb)
				}
				e.queue(tb, s, pkt, tail, vtep)
			}
			return
		}
	}
	flood := e.fdb.Flood(e.cfg.VNI)
	if len(flood) == 0 || e.cfg.Routed {
		e.c.drop(DropNoVTEP)
		return
	}
	if b := e.cfg.BUM; b != nil {
		if !tb.nowOK {
			tb.now, tb.nowOK = b.now(), true
		}
		if !b.take(tb.now) {
			e.c.drop(DropBUMLimited)
			return
		}
	}
	if e.partial { // several destinations: keep it simple
		tap.CompletePartial(frame, tail)
	}
	sent := false
	for _, vtep := range flood {
		if vtep.Addr() == e.cfg.Local {
			continue
		}
		e.queue(tb, s, pkt, tail, vtep)
		sent = true
	}
	if !sent {
		e.c.drop(DropNoVTEP)
		return
	}
	e.c.add(Floods, 1)
	if f.isARP && f.arp.op == arpRequest && e.cfg.Neigh != nil && f.dst.IsMulticast() {
		e.c.add(ARPFlooded, 1)
	}
}

// finish settles the inner checksum of a frame (frame, followed by tail)
// for vtep when the TAP leaves checksums partial: one left partial goes so
// to a VTEP that takes it, and is completed for any other.
func (e *Engine) finish(frame, tail []byte, vtep netip.AddrPort, tb *txBatch) {
	if !tb.partOK || tb.partVTEP != vtep {
		tb.partVTEP, tb.partHas, tb.partOK = vtep, e.cfg.Partial.Has(vtep), true
	}
	if !tb.partHas {
		tap.CompletePartial(frame, tail)
	} else if tap.IsPartial(frame, tail) {
		e.c.add(TxPartialCsum, 1)
	}
}

// queue appends the datagram pkt, followed by tail, for vtep to sender
// s's list: as it is, or sealed (in a buffer of the batch's: the frame may
// go to several VTEPs, each with its own key) for a member that encrypts.
// Without an agreed key the datagram is dropped, never sent plain.
func (e *Engine) queue(tb *txBatch, s int, pkt, tail []byte, vtep netip.AddrPort) {
	if e.cfg.ESP != nil {
		if p, ok := e.cfg.ESP.Lookup(vtep.Addr()); ok {
			e.seal(tb, s, p.Out, pkt, tail, vtep)
			return
		}
		if !e.plainAllowed(vtep.Addr()) {
			e.c.drop(DropESPNoKey)
			return
		}
	}
	tb.out[s] = append(tb.out[s], Message{Buf: pkt, N: len(pkt), Tail: tail, Addr: vtep})
}

// plainAllowed reports whether plain VXLAN may go to addr when the engine
// encrypts: only to the VTEPs configured as plain (static peers and
// --allow-vtep ranges, the VTEPs of static FDB entries) that are no gossip
// member. Any other VTEP (a member whose keys are not in the table yet, as
// at a takeover's first moments) gets nothing rather than plaintext.
func (e *Engine) plainAllowed(addr netip.Addr) bool {
	f := e.cfg.Filter
	if f == nil {
		return false
	}
	addr = addr.Unmap()
	if _, member := f.Member(addr); member {
		return false
	}
	if _, ok := f.staticPort(addr); ok {
		return true
	}
	for _, p := range f.ranges {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// seal queues pkt and tail sealed in sa for vtep (see queue). The
// payload is copied once, next to its headers, and encrypted in place
// there: GCM wants it in one piece, and the same frame may be sealed for
// several members.
func (e *Engine) seal(tb *txBatch, s int, sa *esp.SA, pkt, tail []byte, vtep netip.AddrPort) {
	n := len(pkt) + len(tail)
	if sa == nil {
		e.c.drop(DropESPNoKey)
		return
	}
	if esp.Headroom+n+esp.Tailroom > tb.sealCap {
		e.c.drop(DropTooBig)
		return
	}
	buf := tb.sealBuf()
	copy(buf[esp.Headroom+copy(buf[esp.Headroom:], pkt):], tail)
	m, err := sa.Seal(buf, n, &tb.sc)
	if err != nil { // exhausted: the next rekey replaces it
		e.c.drop(DropESPNoKey)
		return
	}
	tb.out[s] = append(tb.out[s], Message{Buf: buf, N: m, Addr: vtep})
}

// innerLen is the length of the frame a datagram to send carries: without
// the VXLAN header, and without ESP's (within the 3 bytes of padding).
func innerLen(m *Message) int {
	if m.Tail == nil && esp.IsESP(m.Buf) {
		return m.N - esp.Overhead + 3 - HeaderLen
	}
	return m.Len() - HeaderLen
}

// pathLimit returns the longest frame whose datagram fits the measured
// path MTU towards vtep, when that is smaller than what the underlay MTU
// allows; 0 otherwise (unknown, or no smaller).
func (e *Engine) pathLimit(vtep netip.Addr) int {
	pm := e.cfg.PathMTUs.Get(vtep)
	if pm <= 0 {
		return 0
	}
	lim := max(pm-e.overhead()+ethHeaderLen, ethHeaderLen)
	if e.maxFrame > 0 && lim >= e.maxFrame {
		return 0
	}
	return lim
}

// answerTooBig appends to tb's replies the too-big answer to frame saying
// that IP packets of up to mtu bytes fit, when frame is answered (see
// toobig.go), there is room and the rate limit allows.
func (e *Engine) answerTooBig(frame []byte, mtu int, tb *txBatch) {
	if len(tb.replies) == len(tb.replyBufs) || tooBigFamily(frame) == 0 {
		return
	}
	if !tb.tooBigNowOK {
		tb.tooBigNow, tb.tooBigNowOK = e.tooBig.now(), true
	}
	if !e.tooBig.take(tb.tooBigNow) {
		return
	}
	b := tb.replyBufs[len(tb.replies)]
	if n := putTooBig(b, frame, mtu, e.cfg.MAC); n > 0 {
		tb.replies = append(tb.replies, b[:n])
		e.c.add(TooBig, 1)
	}
}

// pathMTUer is a Transport that knows the path MTU towards a destination
// (UDPConn: the kernel's, from its route cache).
type pathMTUer interface {
	PathMTU(dst netip.Addr) int
}

// refused answers the datagrams of msgs (sent by sender s) that the socket
// refused as too big (Message.TooBig), counts them as DropTooBig and
// returns how many there were. The MTU told is EngineConfig.UnderlayMTU's,
// or else the socket's path MTU towards the first refused destination;
// without either nothing is answered. A frame flooded to several VTEPs is
// answered once.
func (e *Engine) refused(s int, msgs []Message, tb *txBatch) int {
	n, mtu := 0, e.maxFrame-ethHeaderLen
	var last *byte
	for i := range msgs {
		m := &msgs[i]
		if !m.TooBig {
			continue
		}
		n++
		e.c.drop(DropTooBig)
		if mtu <= 0 {
			mtu = -1
			if p, ok := e.senders[s].(pathMTUer); ok {
				if pm := p.PathMTU(m.Addr.Addr()); pm > e.overhead() {
					mtu = pm - e.overhead()
				}
			}
		}
		// A sealed datagram holds ciphertext, nothing to answer from.
		if mtu > 0 && &m.Buf[0] != last && !(m.Tail == nil && esp.IsESP(m.Buf)) {
			last = &m.Buf[0]
			e.answerTooBig(m.Buf[HeaderLen:m.N], mtu, tb)
		}
	}
	return n
}

// Probe writes a liveness probe into the TAP from EngineConfig.ProbeMAC to
// the endpoint at mac, asking for ip: an ARP probe (IPv4), or a unicast
// Neighbor Solicitation from the probe MAC's link-local address (IPv6).
// Its answer comes back as a Sighting with Answer set. It may be called
// from any goroutine; it allocates (it is not on the data path).
func (e *Engine) Probe(mac fdb.MAC, ip netip.Addr) error {
	ip = ip.Unmap()
	if e.cfg.ProbeMAC.IsZero() || !ip.IsValid() || ip.IsMulticast() || ip.IsUnspecified() {
		return fmt.Errorf("encap: cannot probe %s at %s", ip, mac)
	}
	b := make([]byte, naFrameLen)
	if ip.Is4() {
		b = b[:putARPProbe(b, mac, e.cfg.ProbeMAC, ip)]
	} else {
		b = b[:putNSProbe(b, mac, e.cfg.ProbeMAC, ip)]
	}
	if _, err := e.writeTAP([][]byte{b}, 0); err != nil {
		return err
	}
	e.c.add(ProbesSent, 1)
	return nil
}

// snoop reports src, and the binding bind → src (when bind is valid: an
// ARP sender, an NS source, an NA target), when they are not yet known as
// living behind this node, and marks known ones as seen.
func (e *Engine) snoop(src fdb.MAC, bind netip.Addr) {
	if src.IsMulticast() || src.IsZero() {
		return
	}
	// Seen also refreshes a known local entry's last-seen time, by which
	// the node ages endpoints that went away.
	if vtep, ok := e.fdb.Seen(e.cfg.VNI, src); !ok || vtep.Addr() != e.cfg.Local {
		e.report(Sighting{MAC: src})
	}
	if !bind.IsValid() || e.cfg.Neigh == nil {
		return
	}
	// A binding to src that another node announced (gossip, EVPN) is not
	// ours yet: the endpoint moved here with its MAC and address, and
	// must be claimed (a higher version, a higher MAC mobility sequence).
	if mac, o, ok := e.cfg.Neigh.LookupOrigin(e.cfg.VNI, bind); ok {
		if mac != src || (o != fdb.OriginLocal && o != fdb.OriginStatic) {
			e.report(Sighting{MAC: src, IP: bind})
		}
		return
	}
	if mac, ok := e.cfg.Neigh.Lookup(e.cfg.VNI, bind); !ok || mac != src {
		e.report(Sighting{MAC: src, IP: bind})
	}
}

func (e *Engine) report(s Sighting) {
	select {
	case e.cfg.Snoop <- s:
	default:
		e.c.add(SnoopDropped, 1)
	}
}

// learn records src as living behind the VTEP at addr: at the port its
// static peer entry (--peer IP:PORT) or static FDB entries give, or Port.
func (e *Engine) learn(src fdb.MAC, addr netip.Addr) {
	port := e.cfg.Port
	if p, ok := e.cfg.PeerPorts[addr]; ok {
		port = p
	} else if p, ok := e.cfg.Filter.staticPort(addr); ok {
		port = p
	}
	switch e.fdb.Learn(e.cfg.VNI, src, netip.AddrPortFrom(addr, port)) {
	case fdb.LearnAdded:
		e.c.add(Learned, 1)
	case fdb.LearnMoved:
		e.c.add(Moved, 1)
	case fdb.LearnRefusedFull:
		e.c.add(LearnRefusedFull, 1)
	case fdb.LearnRefusedQuota:
		e.c.add(LearnRefusedQuota, 1)
	}
}

// isClosed reports whether err says the device or socket was closed, or
// its reads stopped (Demux.StopReading), which is how Run stops the loops.
func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) || errors.Is(err, os.ErrDeadlineExceeded)
}
