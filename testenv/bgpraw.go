// A raw BGP speaker: opens an l2vpn evpn session and sends UPDATEs built
// from bytes it is given, malformed ones included, for robustness tests.
//
// The messages, as RFC 4271 §4 lays them out (every integer big-endian):
//
//	header (§4.1)   marker 16×0xff | length 2 (whole message, 19..4096) | type 1
//	                type 1 OPEN, 2 UPDATE, 3 NOTIFICATION, 4 KEEPALIVE (header only)
//	OPEN (§4.2)     version 1 (4) | my AS 2 (AS_TRANS 23456 above 65535) | hold time 2 |
//	                BGP identifier 4 | opt param len 1 | params:
//	                  type 2 (capabilities, RFC 5492) | len 1 | capabilities:
//	                    code 1 multiprotocol (RFC 4760 §8) | len 4 | AFI 2 (25 l2vpn) | 0 | SAFI 1 (70 evpn)
//	                    code 65 4-octet AS (RFC 6793)      | len 4 | AS 4
//	UPDATE (§4.3)   withdrawn len 2 (0) | path attributes len 2 | attributes | NLRI (none: all in MP_REACH)
//	                attribute: flags 1 (0x80 optional, 0x40 transitive, 0x10 extended length) |
//	                           type 1 | length 1 (2 with extended length) | value
//	                  ORIGIN 1 (IGP 0); AS_PATH 2 (empty for iBGP, else one AS_SEQUENCE of
//	                  our 4-octet AS); LOCAL_PREF 5 (100, iBGP only);
//	                  EXTENDED_COMMUNITIES 16 (RFC 4360): route target AS:VNI (0x00 0x02 AS 2 | VNI 4)
//	                  and encapsulation VXLAN (0x03 0x0c | 0 4 | tunnel type 8 2, RFC 9012 §4.1);
//	                  MP_REACH_NLRI 14 (RFC 4760 §3): AFI 2 (25) | SAFI 1 (70) | next hop len 1 (4) |
//	                  next hop 4 | reserved 1 (0) | NLRI
//	NOTIFICATION    code 1 | subcode 1 | data (§4.5)
//
// An EVPN NLRI (RFC 7432 §7) is route type 1 | length 1 | that many bytes;
// a MAC/IP advertisement route (type 2, §7.2) is
//
//	RD 8 | ESI 10 | Ethernet tag 4 | MAC length 1 (48, in bits) | MAC 6 |
//	IP length 1 (0, 32 or 128) | IP 0/4/16 | label 3 (the VNI, RFC 8365 §5.1.3)
//
// 33 bytes for a MAC-only route. The RD is type 1 (RFC 4364 §4.2): 0 1 |
// IPv4 address 4 | number 2.

package testenv

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// BGP message types (RFC 4271 §4.1).
const (
	bgpOpen         = 1
	bgpUpdate       = 2
	bgpNotification = 3
	bgpKeepalive    = 4
)

const (
	bgpHeaderLen = 19
	bgpMaxLen    = 4096 // no extended message capability is offered
	bgpHoldTime  = 9    // seconds; keepalives go every third of it
	afiL2VPN     = 25
	safiEVPN     = 70
	asTrans      = 23456 // RFC 6793 §9
)

// BGPRawConfig is the speaker's side of the session.
type BGPRawConfig struct {
	ASN      uint32     // our AS; iBGP when it equals the peer's
	PeerASN  uint32     // the peer's AS, to choose the iBGP or eBGP attributes; 0: ASN
	RouterID netip.Addr // our BGP identifier, IPv4; also the next hop of our routes
}

// BGPRawSpeaker is an established BGP session (l2vpn evpn) whose UPDATEs
// are bytes the test chooses. It sends KEEPALIVEs every 3 s and reads
// everything the peer sends, counting it, until Close or the peer's
// NOTIFICATION or close. Its methods are safe for concurrent use.
type BGPRawSpeaker struct {
	cfg  BGPRawConfig
	conn net.Conn

	wmu sync.Mutex // serializes writes
	// writeTimeout bounds a write (0: bgpWriteTimeout).
	writeTimeout time.Duration
	// cut: a write failed, maybe half-way; the connection is closed, and
	// every write after it fails (under wmu).
	cut  error
	mu   sync.Mutex
	rep  BGPRawReport
	done chan struct{} // closed when the reader stops: NOTIFICATION, close, error
	stop chan struct{} // closed by Close
	once sync.Once
}

// BGPRawReport is what the peer did, counted from its OPEN on.
type BGPRawReport struct {
	PeerASN      uint32           // from the peer's OPEN (4-octet capability, else My AS)
	PeerID       netip.Addr       // the peer's BGP identifier
	Keepalives   int              // KEEPALIVEs received
	Updates      int              // UPDATEs received (its routes, End-of-RIB)
	Notification *BGPNotification // the NOTIFICATION it sent, if any
	Closed       bool             // it closed or reset the connection (reading stops at a NOTIFICATION, so not after one)
	Err          error            // a read error other than a close, or a message we could not read
}

// BGPNotification is a NOTIFICATION message (RFC 4271 §4.5).
type BGPNotification struct {
	Code, Subcode uint8
	Data          []byte
}

// String names the well-known codes: "UPDATE Message Error/Optional
// Attribute Error (3/9)".
func (n BGPNotification) String() string {
	codes := map[uint8]string{1: "Message Header Error", 2: "OPEN Message Error", 3: "UPDATE Message Error",
		4: "Hold Timer Expired", 5: "Finite State Machine Error", 6: "Cease"}
	update := map[uint8]string{1: "Malformed Attribute List", 2: "Unrecognized Well-known Attribute",
		3: "Missing Well-known Attribute", 4: "Attribute Flags Error", 5: "Attribute Length Error",
		6: "Invalid ORIGIN Attribute", 8: "Invalid NEXT_HOP Attribute", 9: "Optional Attribute Error",
		10: "Invalid Network Field", 11: "Malformed AS_PATH"}
	s := codes[n.Code]
	if s == "" {
		s = "code " + fmt.Sprint(n.Code)
	}
	if n.Code == 3 && update[n.Subcode] != "" {
		s += "/" + update[n.Subcode]
	}
	return fmt.Sprintf("%s (%d/%d)", s, n.Code, n.Subcode)
}

// DialTCP connects to addr from inside the host's namespace. The
// connection stays in the namespace.
func (h *Host) DialTCP(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	err := h.Do(func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", addr.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: dial %s: %w", h.Name, addr, err)
	}
	return c, nil
}

// ListenTCP listens on addr inside the host's namespace; Accept may be
// called from anywhere.
func (h *Host) ListenTCP(addr netip.AddrPort) (net.Listener, error) {
	var l net.Listener
	err := h.Do(func() (err error) {
		l, err = net.Listen("tcp", addr.String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("testenv: %s: listen %s: %w", h.Name, addr, err)
	}
	return l, nil
}

// OpenBGP opens a BGP session on conn, which OpenBGP owns from then on: it
// sends our OPEN (hold time 9 s, capabilities multiprotocol l2vpn/evpn and
// 4-octet AS), reads the peer's OPEN, sends a KEEPALIVE and waits for the
// peer's. It returns the established session, or an error that carries the
// peer's NOTIFICATION when it sent one (a peer that refuses us).
func OpenBGP(ctx context.Context, conn net.Conn, cfg BGPRawConfig) (*BGPRawSpeaker, error) {
	if cfg.PeerASN == 0 {
		cfg.PeerASN = cfg.ASN
	}
	if !cfg.RouterID.Is4() {
		conn.Close()
		return nil, fmt.Errorf("testenv: bgp: router id %s is not IPv4", cfg.RouterID)
	}
	s := &BGPRawSpeaker{cfg: cfg, conn: conn, done: make(chan struct{}), stop: make(chan struct{})}
	if err := s.open(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("testenv: bgp open to %s: %w", conn.RemoteAddr(), err)
	}
	go s.readLoop()
	go s.keepaliveLoop()
	return s, nil
}

func (s *BGPRawSpeaker) open(ctx context.Context) error {
	if d, ok := ctx.Deadline(); ok {
		s.conn.SetDeadline(d)
	} else {
		s.conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	defer s.conn.SetDeadline(time.Time{})
	if err := s.write(bgpOpen, openBody(s.cfg)); err != nil {
		return err
	}
	typ, body, err := readMessage(s.conn)
	if err != nil {
		return err
	}
	if typ == bgpNotification {
		return fmt.Errorf("NOTIFICATION %v instead of OPEN", parseNotification(body))
	}
	if typ != bgpOpen {
		return fmt.Errorf("message type %d instead of OPEN", typ)
	}
	if err := s.rep.parseOpen(body); err != nil {
		return err
	}
	if err := s.write(bgpKeepalive, nil); err != nil {
		return err
	}
	typ, body, err = readMessage(s.conn)
	switch {
	case err != nil:
		return err
	case typ == bgpNotification:
		return fmt.Errorf("NOTIFICATION %v instead of KEEPALIVE", parseNotification(body))
	case typ != bgpKeepalive:
		return fmt.Errorf("message type %d instead of KEEPALIVE", typ)
	}
	s.rep.Keepalives++
	return nil
}

// openBody builds the OPEN message body (RFC 4271 §4.2, RFC 5492).
func openBody(cfg BGPRawConfig) []byte {
	myAS := uint16(asTrans)
	if cfg.ASN <= 0xffff {
		myAS = uint16(cfg.ASN)
	}
	caps := []byte{
		1, 4, 0, afiL2VPN, 0, safiEVPN, // multiprotocol l2vpn/evpn
		65, 4, 0, 0, 0, 0, // 4-octet AS, filled in below
	}
	binary.BigEndian.PutUint32(caps[8:], cfg.ASN)
	b := []byte{4, 0, 0, 0, bgpHoldTime, 0, 0, 0, 0, byte(2 + len(caps)), 2, byte(len(caps))}
	binary.BigEndian.PutUint16(b[1:], myAS)
	id := cfg.RouterID.As4()
	copy(b[5:9], id[:])
	return append(b, caps...)
}

// parseOpen reads the peer's AS and identifier from its OPEN body.
func (r *BGPRawReport) parseOpen(b []byte) error {
	if len(b) < 10 || len(b) < 10+int(b[9]) {
		return fmt.Errorf("OPEN of %d bytes", len(b))
	}
	r.PeerASN = uint32(binary.BigEndian.Uint16(b[1:3]))
	r.PeerID = netip.AddrFrom4([4]byte(b[5:9]))
	params := b[10 : 10+int(b[9])]
	for len(params) >= 2 && len(params) >= 2+int(params[1]) {
		if params[0] == 2 { // capabilities
			caps := params[2 : 2+int(params[1])]
			for len(caps) >= 2 && len(caps) >= 2+int(caps[1]) {
				if caps[0] == 65 && caps[1] == 4 {
					r.PeerASN = binary.BigEndian.Uint32(caps[2:6])
				}
				caps = caps[2+int(caps[1]):]
			}
		}
		params = params[2+int(params[1]):]
	}
	return nil
}

// SendEVPN sends one UPDATE whose MP_REACH_NLRI (l2vpn/evpn, next hop our
// router id) carries nlri as it is, with ORIGIN IGP, an AS_PATH, LOCAL_PREF
// 100 on iBGP, and the extended communities route target ASN:vni (two-octet
// AS form; ASN must fit in 16 bits for it to be sent) and encapsulation VXLAN.
func (s *BGPRawSpeaker) SendEVPN(nlri []byte, vni uint32) error {
	return s.SendEVPNVia(nlri, vni, s.cfg.RouterID)
}

// SendEVPNVia is SendEVPN with next hop nh (IPv4) instead of our router id.
func (s *BGPRawSpeaker) SendEVPNVia(nlri []byte, vni uint32, nh netip.Addr) error {
	if err := s.write(bgpUpdate, updateBody(s.cfg, nlri, vni, nh)); err != nil {
		return fmt.Errorf("testenv: bgp: send update: %w", err)
	}
	return nil
}

// SendEVPNRoutes sends routes (whole NLRIs each) with next hop nh, as many
// in each UPDATE as fit in 4096 bytes, as a route reflector packs them. It
// returns the number of UPDATEs sent, and stops at the first error (the
// peer closing the session, say).
func (s *BGPRawSpeaker) SendEVPNRoutes(routes [][]byte, vni uint32, nh netip.Addr) (int, error) {
	room := bgpMaxLen - bgpHeaderLen - len(updateBody(s.cfg, nil, vni, nh))
	sent := 0
	for len(routes) > 0 {
		var nlri []byte
		n := 0
		for n < len(routes) && len(nlri)+len(routes[n]) <= room {
			nlri = append(nlri, routes[n]...)
			n++
		}
		if n == 0 {
			return sent, fmt.Errorf("testenv: bgp: a route of %d bytes does not fit an UPDATE", len(routes[0]))
		}
		if err := s.SendEVPNVia(nlri, vni, nh); err != nil {
			return sent, err
		}
		routes = routes[n:]
		sent++
	}
	return sent, nil
}

// updateBody builds an UPDATE body (RFC 4271 §4.3) around one MP_REACH_NLRI
// with next hop nh.
func updateBody(cfg BGPRawConfig, nlri []byte, vni uint32, nh4 netip.Addr) []byte {
	attr := func(b []byte, flags, typ byte, v []byte) []byte {
		if len(v) > 255 || flags&0x10 != 0 {
			b = append(b, flags|0x10, typ, byte(len(v)>>8), byte(len(v)))
		} else {
			b = append(b, flags, typ, byte(len(v)))
		}
		return append(b, v...)
	}
	var attrs []byte
	attrs = attr(attrs, 0x40, 1, []byte{0}) // ORIGIN IGP
	if cfg.ASN == cfg.PeerASN {
		attrs = attr(attrs, 0x40, 2, nil) // AS_PATH, empty inside the AS
		attrs = attr(attrs, 0x40, 5, []byte{0, 0, 0, 100})
	} else {
		seg := []byte{2, 1, 0, 0, 0, 0} // AS_SEQUENCE of one 4-octet AS
		binary.BigEndian.PutUint32(seg[2:], cfg.ASN)
		attrs = attr(attrs, 0x40, 2, seg)
	}
	if cfg.ASN <= 0xffff {
		ec := []byte{
			0x00, 0x02, 0, 0, 0, 0, 0, 0, // route target AS:VNI
			0x03, 0x0c, 0, 0, 0, 0, 0, 8, // encapsulation: VXLAN
		}
		binary.BigEndian.PutUint16(ec[2:], uint16(cfg.ASN))
		binary.BigEndian.PutUint32(ec[4:], vni)
		attrs = attr(attrs, 0xc0, 16, ec)
	}
	nh := nh4.As4()
	mp := append([]byte{0, afiL2VPN, safiEVPN, 4}, nh[:]...)
	mp = append(mp, 0) // reserved
	mp = append(mp, nlri...)
	attrs = attr(attrs, 0x80|0x10, 14, mp) // always extended length, as most speakers do
	b := []byte{0, 0, byte(len(attrs) >> 8), byte(len(attrs))}
	return append(b, attrs...)
}

// Watch waits until the peer sends a NOTIFICATION or closes, or d passes,
// or ctx is done, and returns what the peer did so far.
func (s *BGPRawSpeaker) Watch(ctx context.Context, d time.Duration) BGPRawReport {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
	case <-ctx.Done():
	}
	return s.Report()
}

// Report returns what the peer did so far.
func (s *BGPRawSpeaker) Report() BGPRawReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rep
}

// Close closes the connection without a NOTIFICATION (the peer sees the TCP
// session end) and returns the final report.
func (s *BGPRawSpeaker) Close() BGPRawReport {
	s.once.Do(func() { close(s.stop) })
	s.conn.Close()
	<-s.done
	return s.Report()
}

func (s *BGPRawSpeaker) readLoop() {
	defer close(s.done)
	for {
		typ, body, err := readMessage(s.conn)
		s.mu.Lock()
		switch {
		case err != nil:
			select {
			case <-s.stop: // our Close
			default:
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || isReset(err) {
					s.rep.Closed = true
				} else {
					s.rep.Err = err
				}
			}
		case typ == bgpKeepalive:
			s.rep.Keepalives++
		case typ == bgpUpdate:
			s.rep.Updates++
		case typ == bgpNotification:
			n := parseNotification(body)
			s.rep.Notification = &n
		}
		s.mu.Unlock()
		if err != nil || typ == bgpNotification {
			return
		}
	}
}

// isReset reports whether err is a connection reset by the peer.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

func (s *BGPRawSpeaker) keepaliveLoop() {
	t := time.NewTicker(bgpHoldTime * time.Second / 3)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			if s.write(bgpKeepalive, nil) != nil {
				return
			}
		case <-s.stop:
			return
		case <-s.done:
			return
		}
	}
}

// write sends one message: header and body.
func (s *BGPRawSpeaker) write(typ byte, body []byte) error {
	msg := make([]byte, bgpHeaderLen, bgpHeaderLen+len(body))
	for i := range 16 {
		msg[i] = 0xff
	}
	binary.BigEndian.PutUint16(msg[16:], uint16(bgpHeaderLen+len(body)))
	msg[18] = typ
	msg = append(msg, body...)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.cut != nil {
		return s.cut
	}
	d := s.writeTimeout
	if d == 0 {
		d = bgpWriteTimeout
	}
	s.conn.SetWriteDeadline(time.Now().Add(d))
	if _, err := s.conn.Write(msg); err != nil {
		// The message may be cut: whatever followed it would be read
		// as its rest (Message Header Error), so nothing does.
		s.cut = fmt.Errorf("an earlier write failed: %w", err)
		s.conn.Close()
		return err
	}
	return nil
}

// bgpWriteTimeout bounds one write. A peer that reads slowly holds a
// write back (TCP's flow control) for as long as it is busy: a minute
// for an agent on a machine at load 30, whose reads the 5 s of before
// outlasted.
const bgpWriteTimeout = time.Minute

// readMessage reads one BGP message and returns its type and body.
func readMessage(r io.Reader) (byte, []byte, error) {
	var h [bgpHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	for _, m := range h[:16] {
		if m != 0xff {
			return 0, nil, errors.New("bgp message without the all-ones marker")
		}
	}
	n := int(binary.BigEndian.Uint16(h[16:]))
	if n < bgpHeaderLen || n > 65535 {
		return 0, nil, fmt.Errorf("bgp message length %d", n)
	}
	body := make([]byte, n-bgpHeaderLen)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return h[18], body, nil
}

func parseNotification(b []byte) BGPNotification {
	var n BGPNotification
	if len(b) >= 2 {
		n.Code, n.Subcode, n.Data = b[0], b[1], append([]byte(nil), b[2:]...)
	}
	return n
}

// MalformedEVPN names an EVPN NLRI for robustness tests.
type MalformedEVPN int

const (
	// EVPNValid is a well-formed MAC-only type-2 route (33 bytes), the control.
	EVPNValid MalformedEVPN = iota
	// EVPNLengthOverrun is that route with its length byte 10 beyond the
	// bytes that follow: the route runs past the end of MP_REACH_NLRI.
	EVPNLengthOverrun
	// EVPNMACLength7 says its MAC is 56 bits long and carries 7 bytes; the
	// route's length (34) agrees, the MAC length is what is wrong.
	EVPNMACLength7
	// EVPNTruncated is a type-2 route of length 5: shorter than its RD.
	EVPNTruncated
	// EVPNMACLengthField is the valid route (length 33) with its MAC
	// length field saying 56 bits: only that field is wrong.
	EVPNMACLengthField
)

func (m MalformedEVPN) String() string {
	switch m {
	case EVPNValid:
		return "valid type-2"
	case EVPNLengthOverrun:
		return "type-2 length overruns the attribute"
	case EVPNMACLength7:
		return "type-2 MAC of 7 bytes, route length 34"
	case EVPNTruncated:
		return "type-2 of 5 bytes"
	case EVPNMACLengthField:
		return "type-2 MAC length field 56, route length 33"
	}
	return fmt.Sprintf("MalformedEVPN(%d)", int(m))
}

// NLRI returns the route's bytes (RFC 7432 §7.2), for the MAC-only route of
// mac in vni with RD rid:1 (RFC 4364 type 1).
func (m MalformedEVPN) NLRI(rid netip.Addr, mac net.HardwareAddr, vni uint32) []byte {
	r := EVPNMACRoute(rid, mac, vni)
	switch m {
	case EVPNLengthOverrun:
		r[1] += 10
	case EVPNMACLength7:
		// MAC length field at 2+8+10+4 = 24; one more MAC byte after the six.
		r[24] = 56
		r = append(r[:31], append([]byte{0xee}, r[31:]...)...)
		r[1]++
	case EVPNTruncated:
		r = r[:7]
		r[1] = 5
	case EVPNMACLengthField:
		r[24] = 56
	}
	return r
}

// EVPNMACRoute returns a MAC-only type-2 EVPN NLRI (RFC 7432 §7.2): RD
// rid:1, ESI 0, Ethernet tag 0, mac (its first 6 bytes, zero-padded), no
// IP, label vni (24 bits, RFC 8365).
func EVPNMACRoute(rid netip.Addr, mac net.HardwareAddr, vni uint32) []byte {
	r := make([]byte, 0, 35)
	r = append(r, 2, 33)
	id := rid.As4()
	r = append(r, 0, 1, id[0], id[1], id[2], id[3], 0, 1) // RD type 1
	r = append(r, make([]byte, 10+4)...)                  // ESI, Ethernet tag
	var m [6]byte
	copy(m[:], mac)
	r = append(r, 48)
	r = append(r, m[:]...)
	r = append(r, 0) // IP length
	return append(r, byte(vni>>16), byte(vni>>8), byte(vni))
}

// EVPNIMETRoute returns a type-3 (inclusive multicast Ethernet tag) EVPN
// NLRI (RFC 7432 §7.3): RD rid:1, Ethernet tag 0, originating router vtep
// (IPv4). Its VNI comes from the UPDATE's route target (SendEVPN's vni).
//
//	RD 8 | Ethernet tag 4 | IP length 1 (32) | IP 4
func EVPNIMETRoute(rid, vtep netip.Addr) []byte {
	r := make([]byte, 0, 19)
	r = append(r, 3, 17)
	id := rid.As4()
	r = append(r, 0, 1, id[0], id[1], id[2], id[3], 0, 1) // RD type 1
	r = append(r, 0, 0, 0, 0, 32)                         // Ethernet tag, IP length
	v := vtep.As4()
	return append(r, v[:]...)
}

// SendMalformedEVPN is the whole robustness probe: from inside host it
// connects to peer port 179, opens an iBGP session as AS asn with the
// host's underlay address as router id, sends the UPDATE carrying m's NLRI
// (MAC 02:00:5e:10:00:01, VNI vni), watches the peer for watch, closes, and
// returns what the peer did.
func SendMalformedEVPN(ctx context.Context, h *Host, peer netip.Addr, asn, vni uint32, m MalformedEVPN, watch time.Duration) (BGPRawReport, error) {
	conn, err := h.DialTCP(ctx, netip.AddrPortFrom(peer, 179))
	if err != nil {
		return BGPRawReport{}, err
	}
	s, err := OpenBGP(ctx, conn, BGPRawConfig{ASN: asn, RouterID: h.Underlay})
	if err != nil {
		return BGPRawReport{}, err
	}
	mac := net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01}
	if err := s.SendEVPN(m.NLRI(h.Underlay, mac, vni), vni); err != nil {
		s.Close()
		return BGPRawReport{}, err
	}
	s.Watch(ctx, watch)
	return s.Close(), nil
}
