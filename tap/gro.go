package tap

import (
	"bytes"
	"encoding/binary"
)

// Receive-side offload: the engine decapsulates a batch of inner frames and,
// instead of writing each to the TAP, writes fewer super-frames that the
// kernel takes as already-coalesced GSO packets (as its own GRO would build).
// Coalesce works in four stages per batch:
//
//  1. Parse each frame: is it TCP (or, when enabled, UDP) directly over IPv4
//     without options or IPv6 without extension headers, exactly as long as
//     its IP header says, with flags that allow merging?
//  2. Verify the IPv4 header and L4 checksums of each candidate. A frame with
//     a bad checksum is passed through untouched so that the kernel drops it;
//     one whose L4 checksum was left partial by its sender (partial.go), any
//     TCP or UDP frame, is passed through or merged as needing a checksum
//     (that test comes first, and is cheap: see groCheck).
//  3. Find the open frame of the same flow and append the payload to it if
//     the segment continues it exactly; otherwise close that frame and open a
//     new one. Other frames close the open frames of their address pair, so
//     the order within a flow is kept. Appending copies nothing: an output
//     frame is a list of parts (its first segment whole, then the payloads
//     of the others) that the TAP writes with one writev.
//  4. Fix the lengths and checksums in the first segment of merged frames and
//     make the virtio-net header of every output frame.

// Kinds of frames, for GRO.
const (
	groOther = iota // not TCP or UDP over IP: passed through
	groTCP
	groUDP
)

// groMaxUDPSegs is UDP_MAX_SEGMENTS of older kernels: virtio_net_hdr_to_skb
// rejects a GSOUDPL4 frame with more segments.
const groMaxUDPSegs = 64

// GRO coalesces batches of Ethernet frames into GSO super-frames for a TAP
// opened with IFF_VNET_HDR, as the kernel's own GRO would build them.
//
// TCP segments of one flow are merged into a GSOTCPv4 or GSOTCPv6 frame when
// they have the same Ethernet addresses, IP addresses and ports; the same
// TOS (traffic class and flow label for IPv6) and TTL (hop limit); IPv4
// without options or fragmentation, IDs that increment unless DF is set;
// IPv6 without extension headers; contiguous sequence numbers; the same ACK,
// window, urgent pointer, flags and options; no SYN, FIN, RST, URG or CWR;
// the payload size of the first segment (a smaller one is merged and ends
// the frame); at most 65535 bytes of IPv4 total length or IPv6 payload
// length. A segment with PSH is merged and ends the frame, which then
// carries PSH. Segments of other flows may come in between.
//
// UDP datagrams are merged the same way into GSOUDPL4 frames (at most 64)
// only after SetUDP(true), which needs a kernel that accepts USO on the TAP
// (Linux 6.2 and later).
//
// A GRO is reused from batch to batch and allocates nothing per batch as
// long as batches have at most the maxFrames given to NewGRO. It is not
// safe for concurrent use.
type GRO struct {
	udp   bool
	items []groItem  // output frames, in the order of their first segment
	open  []int      // indices into items of frames that may still grow
	next  []int      // per input frame: the next frame of its output frame, or -1
	skip  []int      // per input frame: bytes of it not in the output (merged headers)
	parts [][]byte   // the parts of all output frames, frame after frame
	out   []GROFrame // returned by Coalesce
	// partials counts the frames of the last batch with a partial
	// checksum (see Partials).
	partials int
}

// GROFrame is one frame returned by Coalesce: its virtio-net header, and the
// frame itself in parts to be written one after the other (with writev).
type GROFrame struct {
	Hdr   VirtioNetHdr
	Parts [][]byte
}

// groItem is one output frame: a passed-through frame, or the head of a
// merged one.
type groItem struct {
	buf     int    // index in frames of the head frame
	tail    int    // index in frames of the last frame merged (buf if none)
	size    int    // output frame length, growing as payloads are appended
	kind    uint8  // groOther, groTCP, groUDP
	v4      bool   // IPv4, else IPv6
	vflags  uint8  // virtio-net flags if it stays a single frame
	psh     bool   // a merged segment had PSH
	hdrLen  int    // Ethernet+IP+L4 header length
	gsoSize int    // payload length of the head
	segs    int    // number of segments merged
	nextSeq uint32 // TCP sequence number the next segment must have
	nextID  uint16 // IPv4 ID the next segment must have (without DF)
	hash    uint64 // flow hash
	// csumStart and csumOff locate the partial L4 checksum of a frame that
	// stays single (FlagNeedsCsum); csumStart 0: none.
	csumStart, csumOff uint16
}

// groPkt is what stage 1 learns about one frame.
type groPkt struct {
	kind      uint8
	v4        bool
	ip        bool // IPv4 or IPv6 whose addresses can be read
	mergeable bool // kind is groTCP or groUDP and the frame may be merged
	l4Off     int
	hdrLen    int
	payload   int
	hash      uint64
}

// NewGRO returns a GRO for batches of up to maxFrames frames. UDP
// coalescing is off.
func NewGRO(maxFrames int) *GRO {
	g := &GRO{}
	g.grow(max(maxFrames, 1))
	return g
}

// grow makes room for batches of n frames.
func (g *GRO) grow(n int) {
	g.items = make([]groItem, 0, n)
	g.open = make([]int, 0, n)
	g.next = make([]int, n)
	g.skip = make([]int, n)
	g.parts = make([][]byte, 0, n)
	g.out = make([]GROFrame, 0, n)
}

// SetUDP turns UDP coalescing (GSOUDPL4) on or off. Only turn it on if the
// TAP accepted TUNSETOFFLOAD with TUN_F_USO4 and TUN_F_USO6.
func (g *GRO) SetUDP(on bool) { g.udp = on }

// Coalesce merges a batch of frames. It returns the frames to write to the
// TAP, in order, each with its virtio-net header: a frame that starts an
// output frame comes first in its Parts, whole, followed by the payloads of
// the frames merged into it, which are not returned otherwise. The returned
// slice is owned by g and valid until the next call; its parts are slices of
// frames.
//
// Coalesce copies no payload. It rewrites the headers of the first frame of
// a merged output frame in place (IP length and checksum, UDP length, PSH,
// and the L4 checksum field, which gets the pseudo-header sum:
// CHECKSUM_PARTIAL with FlagNeedsCsum); it writes nothing outside the frames,
// which may therefore be slices of one buffer, such as a run of datagrams
// received with UDP GRO. Single TCP/UDP frames whose checksum was verified
// carry FlagDataValid; single frames whose checksum their sender left partial
// (partial.go) carry FlagNeedsCsum, and are merged like verified ones; others
// carry a zero header, so the kernel checks them itself.
func (g *GRO) Coalesce(frames [][]byte) []GROFrame {
	if cap(g.items) < len(frames) {
		g.grow(len(frames))
	}
	g.items, g.open, g.parts, g.out = g.items[:0], g.open[:0], g.parts[:0], g.out[:0]
	g.partials = 0

	for i, f := range frames {
		g.next[i], g.skip[i] = -1, 0
		p := groParse(f, g.udp)
		it := groItem{buf: i, tail: i, size: len(f), kind: p.kind, v4: p.v4}
		var cs, co int
		verified := false
		switch {
		case p.mergeable:
			cs, co, verified = groCheck(f, &p)
		case p.ip:
			cs, _, co = partialCsum(f)
		}
		if cs > 0 {
			g.partials++
			it.csumStart, it.csumOff = uint16(cs), uint16(co)
		}
		if !verified && (cs == 0 || !p.mergeable) {
			if p.ip {
				g.closeAddrs(frames, f, p.v4)
			}
			g.items = append(g.items, it)
			continue
		}
		if j := g.find(frames, f, &p); j >= 0 {
			if g.tryAppend(j, frames, i, &p) {
				continue
			}
			g.closeAt(j)
		}
		if cs == 0 {
			it.vflags = FlagDataValid
		}
		it.hdrLen, it.gsoSize, it.segs, it.hash = p.hdrLen, p.payload, 1, p.hash
		l4 := f[p.l4Off:]
		if p.kind == groTCP {
			it.nextSeq = binary.BigEndian.Uint32(l4[4:]) + uint32(p.payload)
		}
		if p.v4 {
			it.nextID = binary.BigEndian.Uint16(f[ethHdrLen+4:]) + 1
		}
		g.items = append(g.items, it)
		if p.kind != groTCP || l4[13]&tcpFlagPSH == 0 {
			g.open = append(g.open, len(g.items)-1)
		}
	}

	for k := range g.items {
		it := &g.items[k]
		vh := VirtioNetHdr{Flags: it.vflags}
		switch {
		case it.segs > 1:
			vh = groFinish(frames[it.buf], it)
		case it.csumStart > 0:
			vh = VirtioNetHdr{Flags: FlagNeedsCsum, CsumStart: it.csumStart, CsumOffset: it.csumOff}
		}
		start := len(g.parts)
		for i := it.buf; i >= 0; i = g.next[i] {
			g.parts = append(g.parts, frames[i][g.skip[i]:])
		}
		g.out = append(g.out, GROFrame{Hdr: vh, Parts: g.parts[start:len(g.parts):len(g.parts)]})
	}
	return g.out
}

// Partials returns how many frames of the last Coalesce had an L4 checksum
// left partial by their sender (partial.go), now marked as needing one.
func (g *GRO) Partials() int { return g.partials }

// groParse is stage 1.
func groParse(f []byte, udp bool) (p groPkt) {
	if len(f) < ethHdrLen {
		return p
	}
	var proto uint8
	switch binary.BigEndian.Uint16(f[12:]) {
	case ethTypeIPv4:
		if len(f) < ethHdrLen+ipv4MinHdrLen || f[ethHdrLen]>>4 != 4 {
			return p
		}
		p.ip, p.v4 = true, true
		if f[ethHdrLen]&0x0f != 5 || // options
			int(binary.BigEndian.Uint16(f[ethHdrLen+2:])) != len(f)-ethHdrLen || // padding
			binary.BigEndian.Uint16(f[ethHdrLen+6:])&0x3fff != 0 { // fragment
			return p
		}
		proto, p.l4Off = f[ethHdrLen+9], ethHdrLen+ipv4MinHdrLen
	case ethTypeIPv6:
		if len(f) < ethHdrLen+ipv6HdrLen || f[ethHdrLen]>>4 != 6 {
			return p
		}
		p.ip = true
		if int(binary.BigEndian.Uint16(f[ethHdrLen+4:])) != len(f)-ethHdrLen-ipv6HdrLen {
			return p
		}
		proto, p.l4Off = f[ethHdrLen+6], ethHdrLen+ipv6HdrLen
	default:
		return p
	}
	l4 := f[p.l4Off:]
	switch proto {
	case protoTCP:
		if len(l4) < tcpMinHdrLen {
			return p
		}
		p.kind = groTCP
		doff := int(l4[12]>>4) * 4
		if doff < tcpMinHdrLen || len(l4) <= doff ||
			l4[13]&(tcpFlagSYN|tcpFlagFIN|tcpFlagRST|tcpFlagURG|tcpFlagCWR) != 0 {
			return p
		}
		p.hdrLen = p.l4Off + doff
	case protoUDP:
		if len(l4) < udpHdrLen {
			return p
		}
		p.kind = groUDP
		if !udp || len(l4) == udpHdrLen ||
			int(binary.BigEndian.Uint16(l4[4:])) != len(l4) ||
			binary.BigEndian.Uint16(l4[6:]) == 0 { // no checksum to verify
			return p
		}
		p.hdrLen = p.l4Off + udpHdrLen
	default:
		return p
	}
	p.payload = len(f) - p.hdrLen
	p.mergeable = true
	p.hash = groHash(f, p.v4, binary.BigEndian.Uint32(l4), proto)
	return p
}

// groHash hashes the addresses, ports and protocol of a flow.
func groHash(f []byte, v4 bool, ports uint32, proto uint8) uint64 {
	const ip = ethHdrLen
	var a uint64
	if v4 {
		a = binary.BigEndian.Uint64(f[ip+12:])
	} else {
		a = binary.BigEndian.Uint64(f[ip+8:]) ^ binary.BigEndian.Uint64(f[ip+16:])*3 ^
			binary.BigEndian.Uint64(f[ip+24:])*5 ^ binary.BigEndian.Uint64(f[ip+32:])*7
	}
	return (a ^ uint64(ports)<<8 ^ uint64(proto)) * 0x9e3779b97f4a7c15
}

// groCheck is stage 2 for a mergeable frame: its IPv4 header checksum
// must be right, and its L4 checksum either left partial by its sender
// (start, off: where it lies, see partial.go) or right (verified).
//
// The partial test comes first: it compares the field with the
// pseudo-header sum that verification needs anyway, so frames with full
// checksums pay one comparison more, and the partial ones (from agents
// that leave them so, and kernel peers with offloads) are not summed at
// all. The order changes nothing of what is accepted: a frame passes if
// its field holds the partial checksum or a right one, either way. (A
// right checksum equal to the partial one is marked as needing a checksum:
// finishing it gives the same value.) What the field cannot tell, the
// outer UDP checksum covers on the wire: the kernel computes it on the
// sender's socket and verifies it on ours.
func groCheck(f []byte, p *groPkt) (start, off int, verified bool) {
	if !groVerifyIPv4(f, p) {
		return 0, 0, false
	}
	proto, off := uint8(protoTCP), tcpCsumOffset
	if p.kind == groUDP {
		proto, off = protoUDP, udpCsumOffset
	}
	l4 := f[p.l4Off:]
	sum := pseudoHeaderSum(f, p.v4, proto) + uint64(len(l4))
	if binary.BigEndian.Uint16(l4[off:]) == FoldChecksum(sum) {
		return p.l4Off, off, false
	}
	return 0, 0, FoldChecksum(Checksum(l4, sum)) == 0xffff
}

// groVerifyIPv4 checks the IPv4 header checksum of a mergeable frame (true
// for IPv6, which has none).
func groVerifyIPv4(f []byte, p *groPkt) bool {
	return !p.v4 || FoldChecksum(Checksum(f[ethHdrLen:p.l4Off], 0)) == 0xffff
}

// groAddrs returns the source and destination addresses of an IP frame.
func groAddrs(f []byte, v4 bool) []byte {
	if v4 {
		return f[ethHdrLen+12 : ethHdrLen+20]
	}
	return f[ethHdrLen+8 : ethHdrLen+40]
}

// find returns the index in g.open of the open frame of f's flow, or -1.
func (g *GRO) find(frames [][]byte, f []byte, p *groPkt) int {
	for j, k := range g.open {
		it := &g.items[k]
		if it.hash != p.hash || it.kind != p.kind || it.v4 != p.v4 {
			continue
		}
		h := frames[it.buf]
		if bytes.Equal(h[:12], f[:12]) && // MAC addresses
			bytes.Equal(groAddrs(h, p.v4), groAddrs(f, p.v4)) &&
			bytes.Equal(h[p.l4Off:p.l4Off+4], f[p.l4Off:p.l4Off+4]) { // ports
			return j
		}
	}
	return -1
}

// closeAddrs closes the open frames between the IP addresses of f, whatever
// their ports: f cannot be merged and must not be overtaken by later
// segments of a flow it may belong to.
func (g *GRO) closeAddrs(frames [][]byte, f []byte, v4 bool) {
	a := groAddrs(f, v4)
	for j := 0; j < len(g.open); {
		it := &g.items[g.open[j]]
		if it.v4 == v4 && bytes.Equal(groAddrs(frames[it.buf], v4), a) {
			g.closeAt(j)
			continue
		}
		j++
	}
}

// closeAt removes g.open[j]; the order of g.open does not matter.
func (g *GRO) closeAt(j int) {
	last := len(g.open) - 1
	g.open[j] = g.open[last]
	g.open = g.open[:last]
}

// tryAppend is stage 3: it appends the payload of frames[i] to the open
// frame g.open[j] of the same flow if it continues that frame exactly, and
// closes that frame when frames[i] is its last segment.
func (g *GRO) tryAppend(j int, frames [][]byte, i int, p *groPkt) bool {
	const ip = ethHdrLen
	it := &g.items[g.open[j]]
	h, f := frames[it.buf], frames[i]
	if p.hdrLen != it.hdrLen || p.payload > it.gsoSize {
		return false
	}
	newSize := it.size + p.payload
	if p.v4 {
		if newSize-ethHdrLen > maxIPLen ||
			h[ip+1] != f[ip+1] || // TOS
			h[ip+8] != f[ip+8] || // TTL
			h[ip+6] != f[ip+6] { // DF (MF and the offset are 0)
			return false
		}
		if h[ip+6]&0x40 == 0 && binary.BigEndian.Uint16(f[ip+4:]) != it.nextID {
			return false
		}
	} else if newSize-ethHdrLen-ipv6HdrLen > maxIPLen ||
		!bytes.Equal(h[ip:ip+4], f[ip:ip+4]) || // version, traffic class, flow label
		h[ip+7] != f[ip+7] { // hop limit
		return false
	}
	l4h, l4f := h[p.l4Off:], f[p.l4Off:]
	last := p.payload < it.gsoSize
	if p.kind == groTCP {
		if binary.BigEndian.Uint32(l4f[4:]) != it.nextSeq ||
			!bytes.Equal(l4h[8:13], l4f[8:13]) || // ACK, data offset
			l4h[13] != l4f[13]&^tcpFlagPSH || // flags
			!bytes.Equal(l4h[14:16], l4f[14:16]) || // window
			!bytes.Equal(l4h[18:20], l4f[18:20]) || // urgent pointer (URG is not set)
			!bytes.Equal(l4h[tcpMinHdrLen:p.hdrLen-p.l4Off], l4f[tcpMinHdrLen:p.hdrLen-p.l4Off]) { // options
			return false
		}
		if l4f[13]&tcpFlagPSH != 0 {
			it.psh, last = true, true
		}
		it.nextSeq += uint32(p.payload)
	} else if it.segs >= groMaxUDPSegs {
		return false
	}
	g.next[it.tail], g.skip[i] = i, p.hdrLen
	it.tail = i
	it.size = newSize
	it.segs++
	it.nextID++
	if last || p.kind == groUDP && it.segs == groMaxUDPSegs {
		g.closeAt(j)
	}
	return true
}

// groFinish is stage 4 for a merged frame whose first segment is f and whose
// length is it.size: it fixes the IP length (and IPv4 header checksum), the
// UDP length, PSH, and the L4 checksum field, which gets the pseudo-header
// sum, in f, and returns the virtio-net header.
func groFinish(f []byte, it *groItem) VirtioNetHdr {
	const ip = ethHdrLen
	l4Off := ip + ipv6HdrLen
	if it.v4 {
		l4Off = ip + ipv4MinHdrLen
		binary.BigEndian.PutUint16(f[ip+2:], uint16(it.size-ip))
		f[ip+10], f[ip+11] = 0, 0
		binary.BigEndian.PutUint16(f[ip+10:], ^FoldChecksum(Checksum(f[ip:l4Off], 0)))
	} else {
		binary.BigEndian.PutUint16(f[ip+4:], uint16(it.size-l4Off))
	}
	l4Len := it.size - l4Off
	vh := VirtioNetHdr{
		Flags:     FlagNeedsCsum,
		HdrLen:    uint16(it.hdrLen),
		GSOSize:   uint16(it.gsoSize),
		CsumStart: uint16(l4Off),
	}
	proto := uint8(protoTCP)
	if it.kind == groTCP {
		vh.GSOType, vh.CsumOffset = GSOTCPv6, tcpCsumOffset
		if it.v4 {
			vh.GSOType = GSOTCPv4
		}
		if it.psh {
			f[l4Off+13] |= tcpFlagPSH
		}
	} else {
		proto = protoUDP
		vh.GSOType, vh.CsumOffset = GSOUDPL4, udpCsumOffset
		binary.BigEndian.PutUint16(f[l4Off+4:], uint16(l4Len))
	}
	psum := FoldChecksum(pseudoHeaderSum(f, it.v4, proto) + uint64(l4Len))
	binary.BigEndian.PutUint16(f[l4Off+int(vh.CsumOffset):], psum)
	return vh
}
