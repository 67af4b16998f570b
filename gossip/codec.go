package gossip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/uvxlan/uvxlan/fdb"
)

// The wire format of entry messages. Every broadcast that gossip itself
// sends through memberlist is one of these or a leave intent (below), and
// the user state of a push/pull carries one (see "Push/pull states" below);
// the extensions' messages start with their own type byte (extension.go).
// All integers are big endian.
//
//	message:  type (1) = msgEntries | count (4) | entry × count
//
//	entry:    kind (1) | flags (1) | VNI (4) | version (8) | owner length (1) | owner
//	          | FDB body or neighbour body
//
//	FDB body (kind 1):        MAC (6) | address length (1) = 4 or 16 | VTEP address | VTEP port (2)
//	neighbour body (kind 2):  address length (1) = 4 or 16 | IP | MAC (6)
//
//	flags:    bit 0 = deleted (a tombstone); the other bits must be 0.
//
// A node about to leave gracefully also broadcasts
//
//	message:  type (1) = msgLeave | boot (8) | name length (1) | name
//
// so that the others can tell a departure from a failure: memberlist does not
// tell its delegates which one it was.
//
// The decoder is strict: anything it accepts is a valid entry (valid VNI,
// unicast non-zero MACs, usable addresses, a valid owner name), IPv4
// addresses take 4 bytes (IPv4-mapped IPv6 ones are refused), and trailing
// bytes are an error. So the encoding is canonical: whatever decodes
// re-encodes to the same bytes.

// Message types: the first byte of every message. The types below
// MinExtensionType are gossip's; the others are the extensions' (see
// extension.go).
const (
	msgEntries byte = 1
	msgLeave   byte = 2
	msgState   byte = 3
)

const (
	// MaxNameLen bounds node names, in Config and on the wire (and the
	// owner names of extensions' records).
	MaxNameLen = 128
	// maxBatch bounds the entries of one message. A push/pull state holds
	// at most maxRecords entries, so it always fits.
	maxBatch = maxRecords
	// minEntryLen is the smallest encoded entry: an FDB or neighbour entry
	// with a one-byte owner and IPv4 addresses.
	minEntryLen = 1 + 1 + 4 + 8 + 1 + 1 + 6 + 1 + 4
)

const flagDeleted = 1 << 0

// errDecode is wrapped by every decoding error.
var errDecode = errors.New("bad gossip message")

// kind says what an entry maps.
type kind uint8

const (
	kindFDB   kind = 1 // (VNI, MAC) → VTEP
	kindNeigh kind = 2 // (VNI, IP) → MAC
)

func (k kind) String() string {
	switch k {
	case kindFDB:
		return "fdb"
	case kindNeigh:
		return "neigh"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// key identifies an entry: (VNI, MAC) for kindFDB, (VNI, IP) for kindNeigh;
// the other field is zero.
type key struct {
	kind kind
	vni  fdb.VNI
	mac  fdb.MAC    // kindFDB
	ip   netip.Addr // kindNeigh
}

func (k key) String() string {
	if k.kind == kindFDB {
		return fmt.Sprintf("fdb/%d/%s", k.vni, k.mac)
	}
	return fmt.Sprintf("neigh/%d/%s", k.vni, k.ip)
}

// record is one owner's claim on a key: the unit of gossip. Its value is
// vtep for kindFDB and lladdr for kindNeigh; a deleted record (a tombstone)
// still carries the value it withdraws.
type record struct {
	key
	owner   string
	version uint64
	deleted bool
	vtep    netip.AddrPort // kindFDB: the VTEP the MAC is behind
	lladdr  fdb.MAC        // kindNeigh: the MAC bound to the IP
}

// id names the (key, owner) pair: the broadcast name, so that a newer claim
// replaces an older one still queued.
func (r *record) id() string { return r.key.String() + "/" + r.owner }

// sameValue reports whether r and o map their key to the same thing.
func (r *record) sameValue(o *record) bool { return r.vtep == o.vtep && r.lladdr == o.lladdr }

// newer reports whether r supersedes o, two claims by the same owner on the
// same key: a higher version wins; at equal versions a tombstone beats a live
// record, and then the greater value wins, so that every node picks the same
// one whatever order they arrive in. Equal records are not newer.
func (r *record) newer(o *record) bool {
	if r.version != o.version {
		return r.version > o.version
	}
	if r.deleted != o.deleted {
		return r.deleted
	}
	if c := r.vtep.Compare(o.vtep); c != 0 {
		return c > 0
	}
	return string(r.lladdr[:]) > string(o.lladdr[:])
}

// appendEntries appends a message carrying recs to b. The records must be
// valid (as the decoder would accept them) and at most maxBatch.
func appendEntries(b []byte, recs []record) []byte {
	b = append(b, msgEntries)
	b = binary.BigEndian.AppendUint32(b, uint32(len(recs)))
	for i := range recs {
		b = appendRecord(b, &recs[i])
	}
	return b
}

func appendRecord(b []byte, r *record) []byte {
	var flags byte
	if r.deleted {
		flags |= flagDeleted
	}
	b = append(b, byte(r.kind), flags)
	b = binary.BigEndian.AppendUint32(b, uint32(r.vni))
	b = binary.BigEndian.AppendUint64(b, r.version)
	b = append(b, byte(len(r.owner)))
	b = append(b, r.owner...)
	switch r.kind {
	case kindFDB:
		b = append(b, r.mac[:]...)
		b = appendAddr(b, r.vtep.Addr())
		b = binary.BigEndian.AppendUint16(b, r.vtep.Port())
	case kindNeigh:
		b = appendAddr(b, r.ip)
		b = append(b, r.lladdr[:]...)
	}
	return b
}

func appendAddr(b []byte, a netip.Addr) []byte {
	raw := a.AsSlice()
	b = append(b, byte(len(raw)))
	return append(b, raw...)
}

// decodeEntries decodes a message made by appendEntries. The records own
// their memory (nothing refers to b). Errors wrap errDecode.
func decodeEntries(b []byte) ([]record, error) { return decodeEntriesOf(b, msgEntries) }

// decodeEntriesOf decodes entries under message type typ: msgEntries, or
// msgAnswer (pull.go).
func decodeEntriesOf(b []byte, typ byte) ([]record, error) {
	if len(b) < 5 {
		return nil, fmt.Errorf("%w: %w", errDecode, io.ErrUnexpectedEOF)
	}
	if b[0] != typ {
		return nil, fmt.Errorf("%w: unknown message type %d", errDecode, b[0])
	}
	n := binary.BigEndian.Uint32(b[1:5])
	b = b[5:]
	if n > maxBatch || int(n) > len(b)/minEntryLen {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", errDecode, n, len(b))
	}
	recs := make([]record, n)
	for i := range recs {
		var err error
		if b, err = decodeRecord(b, &recs[i]); err != nil {
			return nil, fmt.Errorf("%w: entry %d: %w", errDecode, i, err)
		}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errDecode, len(b))
	}
	return recs, nil
}

// appendLeave appends a leave intent of the named node, in its run started
// at boot.
func appendLeave(b []byte, name string, boot uint64) []byte {
	return appendNamed(b, msgLeave, name, boot)
}

// appendNamed appends a message of type typ naming a node's run: a leave
// intent or a pull request (pull.go).
func appendNamed(b []byte, typ byte, name string, boot uint64) []byte {
	b = append(b, typ)
	b = binary.BigEndian.AppendUint64(b, boot)
	b = append(b, byte(len(name)))
	return append(b, name...)
}

// decodeLeave decodes a message made by appendLeave. Errors wrap errDecode.
func decodeLeave(b []byte) (name string, boot uint64, err error) { return decodeNamed(b, msgLeave) }

// decodeNamed decodes a message made by appendNamed with type typ.
func decodeNamed(b []byte, typ byte) (name string, boot uint64, err error) {
	if len(b) == 0 || b[0] != typ {
		return "", 0, fmt.Errorf("%w: not a message of type %d", errDecode, typ)
	}
	r := Reader{b: b[1:]}
	boot = r.U64()
	name = string(r.Next(int(r.U8())))
	switch {
	case r.err != nil:
		return "", 0, fmt.Errorf("%w: %w", errDecode, r.err)
	case len(r.b) != 0:
		return "", 0, fmt.Errorf("%w: %d trailing bytes", errDecode, len(r.b))
	case !ValidName(name):
		return "", 0, fmt.Errorf("%w: bad node name %q", errDecode, name)
	}
	return name, boot, nil
}

// Reader consumes a byte slice, for the codecs of gossip and of its
// extensions: after the first short read every read returns zeros and Err
// is io.ErrUnexpectedEOF (or why an address is malformed). Reads are at
// most 255 bytes long (lengths are one byte), so a short read allocates
// little.
type Reader struct {
	b   []byte
	err error
}

// NewReader returns a Reader of b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err is the first error of the reads so far.
func (r *Reader) Err() error { return r.err }

// Rest is what the reads have left.
func (r *Reader) Rest() []byte { return r.b }

// Next consumes n bytes.
func (r *Reader) Next(n int) []byte {
	if r.err != nil || len(r.b) < n {
		r.err = io.ErrUnexpectedEOF
		return make([]byte, n)
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *Reader) U8() byte     { return r.Next(1)[0] }
func (r *Reader) U16() uint16  { return binary.BigEndian.Uint16(r.Next(2)) }
func (r *Reader) U32() uint32  { return binary.BigEndian.Uint32(r.Next(4)) }
func (r *Reader) U64() uint64  { return binary.BigEndian.Uint64(r.Next(8)) }
func (r *Reader) MAC() fdb.MAC { return fdb.MAC(r.Next(6)) }

// Addr reads an address: its length (4 or 16) and its bytes; an
// IPv4-mapped IPv6 address is an error.
func (r *Reader) Addr() netip.Addr {
	n := int(r.U8())
	if n != 4 && n != 16 {
		if r.err == nil {
			r.err = fmt.Errorf("address length %d", n)
		}
		return netip.Addr{}
	}
	a, _ := netip.AddrFromSlice(r.Next(n))
	if a.Is4In6() && r.err == nil {
		r.err = errors.New("IPv4-mapped IPv6 address")
	}
	return a
}

func decodeRecord(b []byte, rec *record) ([]byte, error) {
	r := Reader{b: b}
	rec.kind = kind(r.U8())
	flags := r.U8()
	rec.vni = fdb.VNI(r.U32())
	rec.version = r.U64()
	rec.owner = string(r.Next(int(r.U8())))
	rec.deleted = flags&flagDeleted != 0
	switch rec.kind {
	case kindFDB:
		rec.mac = r.MAC()
		a := r.Addr()
		rec.vtep = netip.AddrPortFrom(a, r.U16())
	case kindNeigh:
		rec.ip = r.Addr()
		rec.lladdr = r.MAC()
	default:
		return nil, fmt.Errorf("unknown kind %d", rec.kind)
	}
	if r.err != nil {
		return nil, r.err
	}
	if flags&^flagDeleted != 0 {
		return nil, fmt.Errorf("unknown flags %#x", flags)
	}
	if err := rec.validate(); err != nil {
		return nil, err
	}
	return r.b, nil
}

// validate checks what the decoder promises; the announcing side checks the
// same before it creates a record.
func (r *record) validate() error {
	switch {
	case !r.vni.Valid():
		return fmt.Errorf("invalid VNI %d", r.vni)
	case !ValidName(r.owner):
		return fmt.Errorf("bad owner name %q", r.owner)
	}
	switch r.kind {
	case kindFDB:
		if !validMAC(r.mac) {
			return fmt.Errorf("MAC %s is zero or multicast", r.mac)
		}
		if !fdb.ValidVTEP(r.vtep) {
			return fmt.Errorf("unusable VTEP %s", r.vtep)
		}
	case kindNeigh:
		if !validIP(r.ip) {
			return fmt.Errorf("IP %s is not a unicast address", r.ip)
		}
		if !validMAC(r.lladdr) {
			return fmt.Errorf("MAC %s is zero or multicast", r.lladdr)
		}
	default:
		return fmt.Errorf("unknown kind %d", r.kind)
	}
	return nil
}

func validMAC(m fdb.MAC) bool { return !m.IsZero() && !m.IsMulticast() }

func validIP(a netip.Addr) bool {
	return a.IsValid() && !a.Is4In6() && !a.IsUnspecified() && !a.IsMulticast() && a.Zone() == ""
}

// ValidName reports whether s can be a node name: 1..MaxNameLen bytes
// without control characters (it ends up in logs and in `members`).
func ValidName(s string) bool {
	return s != "" && len(s) <= MaxNameLen && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// Push/pull states. The user state of a push/pull is this node's entries
// and a section for each extension it runs (see extension.go):
//
//	state:    type (1) = msgState | entries message length (4) | entries message | section ...
//	section:  extension type (1) | length (4) | data
//
// Sections are in increasing order of type, and the types are
// MinExtensionType or above; a section runs to the next one or the end.
// The receiver hands each section to its extension of that type and skips
// (and counts) the others; a malformed state is dropped whole.

// section is an extension's part of a push/pull state or of the node
// metadata.
type section struct {
	typ  byte
	data []byte
}

// appendState appends a push/pull state. The sections must be in
// increasing order of type, MinExtensionType or above.
func appendState(b []byte, entries []record, sections []section) []byte {
	b = append(b, msgState, 0, 0, 0, 0)
	start := len(b)
	b = appendEntries(b, entries)
	binary.BigEndian.PutUint32(b[start-4:start], uint32(len(b)-start))
	for _, s := range sections {
		b = append(b, s.typ)
		b = binary.BigEndian.AppendUint32(b, uint32(len(s.data)))
		b = append(b, s.data...)
	}
	return b
}

// decodeState decodes a message made by appendState. The records own their
// memory; the sections' data are subslices of b. Errors wrap errDecode.
func decodeState(b []byte) ([]record, []section, error) {
	if len(b) < 5 || b[0] != msgState {
		return nil, nil, fmt.Errorf("%w: not a state message", errDecode)
	}
	n := binary.BigEndian.Uint32(b[1:5])
	if uint64(n) > uint64(len(b)-5) {
		return nil, nil, fmt.Errorf("%w: entries of %d bytes in %d", errDecode, n, len(b)-5)
	}
	recs, err := decodeEntries(b[5 : 5+n])
	if err != nil {
		return nil, nil, err
	}
	var sections []section
	for rest := b[5+n:]; len(rest) > 0; {
		if len(rest) < 5 {
			return nil, nil, fmt.Errorf("%w: section %d: %w", errDecode, len(sections), io.ErrUnexpectedEOF)
		}
		t, l := rest[0], binary.BigEndian.Uint32(rest[1:5])
		if uint64(l) > uint64(len(rest)-5) {
			return nil, nil, fmt.Errorf("%w: section %d of %d bytes in %d", errDecode, len(sections), l, len(rest)-5)
		}
		if t < MinExtensionType || (len(sections) > 0 && t <= sections[len(sections)-1].typ) {
			return nil, nil, fmt.Errorf("%w: section of type %d out of order", errDecode, t)
		}
		end := 5 + int(l)
		sections = append(sections, section{typ: t, data: rest[5:end:end]})
		rest = rest[end:]
	}
	return recs, sections, nil
}
