package esp

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Sizes of the wire format (see the package comment).
const (
	HeaderLen = 8  // SPI and the sequence number's low 32 bits
	IVLen     = 8  // the explicit IV: the 64-bit sequence number
	UDPLen    = 8  // the protected VXLAN datagram's own UDP header
	ICVLen    = 16 // the GCM tag
	// Headroom is what SA.Seal writes in front of the VXLAN datagram.
	Headroom = HeaderLen + IVLen + UDPLen
	// Tailroom is the most SA.Seal appends behind it: padding (up to 3),
	// pad length, next header, ICV.
	Tailroom = 3 + 2 + ICVLen
	// Overhead is the most ESP adds to a VXLAN datagram.
	Overhead = Headroom + Tailroom

	keyLen  = 16 // AES-128
	saltLen = 4  // RFC 4106's salt: the nonce is salt ‖ IV
	// nextHeaderUDP is the protected payload's protocol: the VXLAN
	// datagram with its UDP header.
	nextHeaderUDP = 17
	// innerPort is the ports of the protected datagram's UDP header:
	// VXLAN's IANA port.
	innerPort = 4789
	// maxSeq is where an SA stops sending: far beyond what 2 minutes of
	// traffic use, far below the 64-bit wrap.
	maxSeq = 1 << 62
)

// spiMark and spiClear make an SPI distinguishable from a VXLAN header:
// its first byte has the top bit set and bit 0x08 clear.
const (
	spiMark  = 0x80000000
	spiClear = 0x08000000
)

// IsESP reports whether a datagram received on the VXLAN port is ESP (its
// first byte could be no SPI of ours, else): a VXLAN header's first byte
// has the I flag (0x08) set, an SPI of ours has it clear and the top bit set.
func IsESP(b []byte) bool { return len(b) > 0 && b[0]&0x88 == 0x80 }

// SA is one direction of a pair's security association: a key, the GCM
// salt, the SPI, and either the next sequence number to send (outbound) or
// the replay window (inbound). Seal and Open are safe for concurrent use
// and do not allocate.
type SA struct {
	SPI  uint32
	Peer netip.Addr // the other end's VTEP address
	aead cipher.AEAD
	salt [saltLen]byte
	// seq is the last sequence number used (outbound).
	seq atomic.Uint64
	// mu guards win and paused (inbound): win is checked before
	// decryption, updated after; while paused, Open waits on resume.
	mu     sync.Mutex
	win    window
	paused bool
	resume sync.Cond // L is &mu
	// key is kept for the key log only; Wipe clears it.
	key [keyLen]byte
}

// newSA makes an SA from derived key material.
func newSA(spi uint32, peer netip.Addr, key [keyLen]byte, salt [saltLen]byte) (*SA, error) {
	blk, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		return nil, err
	}
	sa := &SA{SPI: spi, Peer: peer, aead: aead, salt: salt, key: key}
	sa.resume.L = &sa.mu
	return sa, nil
}

// Wipe clears the copy of the key the SA keeps for the key log. (The
// AES key schedule inside crypto/cipher cannot be cleared; the SA is
// dropped with it.)
func (sa *SA) Wipe() { clear(sa.key[:]) }

// Seq returns the last sequence number sent (outbound), for a handover.
func (sa *SA) Seq() uint64 { return sa.seq.Load() }

// SkipTo makes the next sequence number sent above seq (a handover: the
// new process continues beyond what the old one may still have sent).
func (sa *SA) SkipTo(seq uint64) {
	for {
		cur := sa.seq.Load()
		if cur >= seq || sa.seq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// ErrExhausted is returned by Seal when the SA has used its sequence
// numbers (it is rekeyed long before).
var ErrExhausted = errors.New("esp: sequence numbers exhausted")

// Scratch is the nonce and AAD of one Seal or Open call: a caller's (one
// per goroutine, kept across calls), so that nothing escapes to the heap.
type Scratch struct {
	nonce [saltLen + IVLen]byte
	aad   [12]byte
}

// Seal turns the VXLAN datagram b[Headroom:Headroom+n] into an ESP
// datagram in place: it writes the ESP header, the IV and the inner UDP
// header (ports 4789) in front, the trailer behind, encrypts,
// appends the ICV, and returns the datagram's length (from b[0]). cap(b)
// must be at least Headroom+n+Tailroom.
func (sa *SA) Seal(b []byte, n int, s *Scratch) (int, error) {
	seq := sa.seq.Add(1)
	if seq >= maxSeq {
		return 0, ErrExhausted
	}
	pad := (4 - (UDPLen+n+2)%4) % 4
	plain := UDPLen + n + pad + 2
	b = b[:HeaderLen+IVLen+plain+ICVLen]
	binary.BigEndian.PutUint32(b[0:], sa.SPI)
	binary.BigEndian.PutUint32(b[4:], uint32(seq))
	binary.BigEndian.PutUint64(b[8:], seq)
	u := b[HeaderLen+IVLen:]
	binary.BigEndian.PutUint16(u[0:], innerPort)
	binary.BigEndian.PutUint16(u[2:], innerPort)
	binary.BigEndian.PutUint16(u[4:], uint16(UDPLen+n))
	u[6], u[7] = 0, 0
	t := u[UDPLen+n:]
	for i := range pad { // RFC 4303 §2.4: 1, 2, 3, ...
		t[i] = byte(i + 1)
	}
	t[pad], t[pad+1] = byte(pad), nextHeaderUDP
	copy(s.nonce[:], sa.salt[:])
	copy(s.nonce[saltLen:], b[8:16])
	binary.BigEndian.PutUint32(s.aad[0:], sa.SPI)
	binary.BigEndian.PutUint64(s.aad[4:], seq)
	sa.aead.Seal(u[:0], s.nonce[:], u[:plain], s.aad[:])
	return len(b), nil
}

// Result says what Open made of a datagram.
type Result uint8

const (
	OK         Result = iota
	AuthFailed        // too short, malformed, or the ICV does not match
	Replayed          // a sequence number seen, or too old for the window
)

// SPIOf returns the SPI of an ESP datagram (0 if too short).
func SPIOf(b []byte) uint32 {
	if len(b) < HeaderLen {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

// Open authenticates and decrypts the ESP datagram b in place and returns
// the VXLAN datagram in it (a subslice of b), or why it is dropped. The
// replay window is checked before decryption and updated only after the
// ICV matched (RFC 4303 §3.4.3).
func (sa *SA) Open(b []byte, s *Scratch) ([]byte, Result) {
	if len(b) < HeaderLen+IVLen+UDPLen+2+ICVLen || (len(b)-HeaderLen-IVLen-ICVLen)%4 != 0 {
		return nil, AuthFailed
	}
	seq := binary.BigEndian.Uint64(b[8:16])
	if binary.BigEndian.Uint32(b) != sa.SPI || uint32(seq) != binary.BigEndian.Uint32(b[4:8]) || seq == 0 || seq >= maxSeq {
		return nil, AuthFailed
	}
	sa.mu.Lock()
	for sa.paused {
		sa.resume.Wait()
	}
	fresh := sa.win.check(seq)
	sa.mu.Unlock()
	if !fresh {
		return nil, Replayed
	}
	copy(s.nonce[:], sa.salt[:])
	copy(s.nonce[saltLen:], b[8:16])
	binary.BigEndian.PutUint32(s.aad[0:], sa.SPI)
	binary.BigEndian.PutUint64(s.aad[4:], seq)
	ct := b[HeaderLen+IVLen:]
	p, err := sa.aead.Open(ct[:0], s.nonce[:], ct, s.aad[:])
	if err != nil {
		return nil, AuthFailed
	}
	sa.mu.Lock()
	fresh = sa.win.record(seq)
	sa.mu.Unlock()
	if !fresh {
		return nil, Replayed // the same datagram, decrypted twice at once
	}
	pad := int(p[len(p)-2])
	if p[len(p)-1] != nextHeaderUDP || UDPLen+pad+2 > len(p) {
		return nil, AuthFailed
	}
	return p[UDPLen : len(p)-2-pad], OK
}

// A successor of a takeover opens an inbound SA only with its
// predecessor's last replay window (see cmd/uvxlan/node/encrypt.go): it
// pauses the SA while the predecessor still opens with it, then resumes it
// with the window the predecessor ended with.

// Pause makes Open wait, before it checks the replay window, until Resume
// or Refuse: the caller's goroutine blocks with its datagram, nothing is
// dropped. Call it before the SA is in a Table.
func (sa *SA) Pause() {
	sa.mu.Lock()
	sa.paused = true
	sa.mu.Unlock()
}

// Resume takes the replay window another process ended with (as
// ReplayWindow returned it; nil keeps the SA's own) and ends a Pause. A
// window that does not parse is an error, and the SA then refuses
// everything (Refuse).
func (sa *SA) Resume(win []byte) error {
	var w window
	err := w.UnmarshalBinary(win)
	sa.mu.Lock()
	defer sa.mu.Unlock()
	switch {
	case err != nil:
		sa.win.refuseAll()
	case win != nil:
		sa.win = w
	}
	sa.paused = false
	sa.resume.Broadcast()
	return err
}

// Refuse makes Open refuse every sequence number from now on (Replayed)
// and ends a Pause: for an SA whose predecessor's window is unknown.
func (sa *SA) Refuse() {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	sa.win.refuseAll()
	sa.paused = false
	sa.resume.Broadcast()
}

// ReplayWindow returns the inbound SA's replay window (WindowLen bytes),
// for a successor's Resume.
func (sa *SA) ReplayWindow() []byte {
	sa.mu.Lock()
	defer sa.mu.Unlock()
	b, _ := sa.win.MarshalBinary()
	return b
}
