package gossip

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/uvxlan/uvxlan/fdb"
)

// Node metadata: what every member tells the others about itself in
// memberlist's NodeMeta (at most memberlist.MetaMaxSize, 512 bytes).
//
//	version (1) | boot (8) | address length (1) = 4 or 16 | VTEP address | VTEP port (2)
//	| TAP MAC (6) | VNI count (1) | VNI (4) × count
//	| pinned MAC count (1) | MAC (6) × count
//	| pinned address count (1) | (VNI (4) | address length (1) = 4 or 16 | address) × count
//	| section count (1) | (extension type (1) | length (1) | data) × count
//	| source ports: extra (2) | first (2) | mask (8)             (version 6 on)
//	| features (1)                                              (version 7 on)
//	| digest: live record count (4) | record hash sum (8)       (version 5 on)
//
// version is the version the node speaks now (see protoVersion); a node
// speaking one we do not read is refused before anything else is read,
// since the rest may mean something else to us. boot
// is the node's clock when it started (see clock): every record it creates
// has a higher version, so records older than boot are from an earlier run
// of the node and are dropped. The TAP MAC is zero when the node has none.
// The pinned MACs (the node's TAP MACs) and
// addresses (its TAP addresses, each in the VNI of its segment) belong to
// the node: see pinned.go. Each list is at most maxPinned long, without
// duplicates; an address's VNI is one the node serves. The sections are the contributions of the node's extensions
// (Extension.Meta, at most MaxExtensionMeta bytes each), in increasing order
// of type; a node refuses a peer whose sections its extensions refuse, or
// that has a section of an extension it does not run.
//
// The source ports (version 6) are the UDP ports the node's agent sends
// VXLAN from besides its VTEP port (see SourcePorts): the receivers accept
// its datagrams from those only (encap's filter), so that another process
// on its host cannot speak for it. A node whose metadata has none (version
// 4 or 5: a release before version 6, or a node of this release speaking
// an older version to one) is accepted from any source port, as before.
//
// The features (version 7) are what the node's agent can do that older
// ones cannot, one bit each; a reader ignores the bits it does not know, so
// later features need no new version. FeaturePartialCsum: its VTEP accepts
// frames whose inner TCP or UDP checksum is left partial (see the feature).
// A node whose metadata has none (before version 7: a release of version 6
// or older, or any node while one is in the cluster) gets full checksums.
//
// The digest (version 5) summarizes the records the node owns: how many are
// live, and the sum (mod 2^64) of their hashes (recordHash). A node that
// holds another digest for that owner lacks something, or holds what the
// owner withdrew: it pulls the owner's records (pull.go). Version 4
// metadata, of nodes built before the digest, decodes without one (hasDigest
// false): such a node is a member like any other, only never pulled from.

// protoVersion is the latest version of the gossip protocol (entry
// messages, push/pull states and metadata) this package speaks, and
// minProtoVersion the oldest it reads; nodes speaking another one are
// refused. Version 3: extensions (sections in states and metadata). Version
// 4: pinned keys in the metadata. Version 5: the digest in the metadata,
// and the pull messages (pull.go); the entry and state formats are version
// 4's. Version 6: the source ports in the metadata; nothing else changes.
// Version 7: the features in the metadata; nothing else changes.
//
// Mixed clusters (a rolling upgrade, a rollback). Releases before version 5
// refuse any metadata but version 4's, releases of version 5 any but 4's
// and 5's, releases of version 6 any later one, while we read them all. So a node advertises the highest
// version it reads in memberlist's alive messages (the delegate protocol
// maximum, DMax: protoVersion here, 6 or 5 in releases of those versions,
// 0 in those before, which leave it unset), and speaks the highest version
// that every alive member reads: with a member of DMax 6 it speaks version
// 6, without the features, with one of DMax 5 version 5, without the source
// ports either, with one of DMax 0 version 4, without the digest either
// (spokenVersion, chooseVersionLocked). memberlist only
// checks the delegate versions in use, which are 0 everywhere, so the
// maximum changes nothing else.
const (
	protoVersion    = 7
	minProtoVersion = 4
)

// Features a node announces in its metadata (version 7 on), one bit each.
const (
	// FeaturePartialCsum: the node's VTEP accepts frames whose inner TCP
	// or UDP checksum the sender left partial (the field holds the
	// pseudo-header sum, as for a NIC to finish: CHECKSUM_PARTIAL), and
	// completes them or hands them to its TAP as needing a checksum.
	FeaturePartialCsum uint8 = 1 << 0
)

// digestLen is the digest's size in the metadata, srcPortsLen the source
// ports' and featuresLen the features'.
const (
	digestLen   = 4 + 8
	srcPortsLen = 2 + 2 + 8
	featuresLen = 1
)

// SourcePorts are the UDP ports a node's agent sends VXLAN from besides its
// VTEP port: Extra (one socket; 0: none), and First+i for every bit i set
// in Mask (its source port range, the ports it could bind; Mask 0: none).
// They travel in the metadata from version 6 on.
type SourcePorts struct {
	Extra uint16 `json:"extra,omitempty"`
	First uint16 `json:"first"`
	Mask  uint64 `json:"mask"`
}

// valid reports whether every port of p is a port (1 to 65535).
func (p SourcePorts) valid() bool {
	if p.Mask == 0 {
		return true
	}
	top := 63 - bits.LeadingZeros64(p.Mask) // the highest bit set
	return p.First != 0 && int(p.First)+top <= 65535
}

// maxVNIs bounds Config.VNIs, so that the metadata always fits.
const maxVNIs = 64

// errIncompatible is wrapped by decodeMeta for a node that speaks another
// protocol version.
var errIncompatible = errors.New("incompatible gossip protocol version")

// meta is a node's metadata, decoded.
type meta struct {
	version uint8
	boot    uint64
	vtep    netip.AddrPort
	mac     fdb.MAC
	vnis    []fdb.VNI
	macs    []fdb.MAC    // pinned MACs
	addrs   []PinnedAddr // pinned addresses
	ext     []section    // extensions' metadata, by increasing type
	// ports are the source ports of the node's datagrams; hasPorts is
	// false before version 6, which has none.
	ports    SourcePorts
	hasPorts bool
	// features are the Feature bits the node announces; 0 before
	// version 7, which has none.
	features uint8
	// digest of the node's own live records; hasDigest is false for
	// version 4 metadata, which has none.
	digest    digest
	hasDigest bool
}

// section returns the metadata of extension t, or nil.
func (m *meta) section(t byte) []byte {
	for _, s := range m.ext {
		if s.typ == t {
			return s.data
		}
	}
	return nil
}

func (m *meta) serves(vni fdb.VNI) bool { return slices.Contains(m.vnis, vni) }

func (m meta) encode() []byte {
	b := make([]byte, 0, 1+8+1+16+2+6+1+4*len(m.vnis))
	b = append(b, m.version)
	b = binary.BigEndian.AppendUint64(b, m.boot)
	b = appendAddr(b, m.vtep.Addr())
	b = binary.BigEndian.AppendUint16(b, m.vtep.Port())
	b = append(b, m.mac[:]...)
	b = append(b, byte(len(m.vnis)))
	for _, v := range m.vnis {
		b = binary.BigEndian.AppendUint32(b, uint32(v))
	}
	b = append(b, byte(len(m.macs)))
	for _, mac := range m.macs {
		b = append(b, mac[:]...)
	}
	b = append(b, byte(len(m.addrs)))
	for _, a := range m.addrs {
		b = binary.BigEndian.AppendUint32(b, uint32(a.VNI))
		b = appendAddr(b, a.Addr)
	}
	b = append(b, byte(len(m.ext)))
	for _, s := range m.ext {
		b = append(b, s.typ, byte(len(s.data)))
		b = append(b, s.data...)
	}
	if m.version >= 6 {
		b = binary.BigEndian.AppendUint16(b, m.ports.Extra)
		b = binary.BigEndian.AppendUint16(b, m.ports.First)
		b = binary.BigEndian.AppendUint64(b, m.ports.Mask)
	}
	if m.version >= 7 {
		b = append(b, m.features)
	}
	if m.version >= 5 {
		b = binary.BigEndian.AppendUint32(b, m.digest.count)
		b = binary.BigEndian.AppendUint64(b, m.digest.sum)
	}
	return b
}

// decodeMeta decodes and checks a node's metadata. A version other than
// minProtoVersion to protoVersion is an error wrapping errIncompatible.
func decodeMeta(b []byte) (meta, error) {
	var m meta
	if len(b) == 0 {
		return m, fmt.Errorf("no node metadata (not a uvxlan node?): %w", io.ErrUnexpectedEOF)
	}
	if b[0] < minProtoVersion || b[0] > protoVersion {
		return m, fmt.Errorf("%w: it speaks version %d, we speak %d", errIncompatible, b[0], protoVersion)
	}
	r := Reader{b: b[1:]}
	m.version = b[0]
	m.boot = r.U64()
	a := r.Addr()
	m.vtep = netip.AddrPortFrom(a, r.U16())
	m.mac = r.MAC()
	n := int(r.U8())
	if n > maxVNIs {
		return meta{}, fmt.Errorf("bad node metadata: %d VNIs", n)
	}
	for range n {
		m.vnis = append(m.vnis, fdb.VNI(r.U32()))
	}
	if n = int(r.U8()); n > maxPinned {
		return meta{}, fmt.Errorf("bad node metadata: %d pinned MACs", n)
	}
	for range n {
		m.macs = append(m.macs, r.MAC())
	}
	if n = int(r.U8()); n > maxPinned {
		return meta{}, fmt.Errorf("bad node metadata: %d pinned addresses", n)
	}
	for range n {
		vni := fdb.VNI(r.U32())
		m.addrs = append(m.addrs, PinnedAddr{VNI: vni, Addr: r.Addr()})
	}
	n = int(r.U8())
	for range n {
		t := r.U8()
		data := bytes.Clone(r.Next(int(r.U8())))
		if r.err == nil && (t < MinExtensionType || len(data) > MaxExtensionMeta ||
			(len(m.ext) > 0 && t <= m.ext[len(m.ext)-1].typ)) {
			return meta{}, fmt.Errorf("bad node metadata: extension section of type %d, %d bytes", t, len(data))
		}
		m.ext = append(m.ext, section{typ: t, data: data})
	}
	if m.version >= 6 {
		m.ports, m.hasPorts = SourcePorts{Extra: r.U16(), First: r.U16(), Mask: r.U64()}, true
	}
	if m.version >= 7 {
		m.features = r.U8()
	}
	if m.version >= 5 {
		m.digest.count, m.digest.sum, m.hasDigest = r.U32(), r.U64(), true
	}
	if r.err != nil {
		return meta{}, fmt.Errorf("bad node metadata: %w", r.err)
	}
	if len(r.b) != 0 {
		return meta{}, fmt.Errorf("bad node metadata: %d trailing bytes", len(r.b))
	}
	if err := m.validate(); err != nil {
		return meta{}, fmt.Errorf("bad node metadata: %w", err)
	}
	return m, nil
}

func (m *meta) validate() error {
	if !fdb.ValidVTEP(m.vtep) {
		return fmt.Errorf("unusable VTEP %s", m.vtep)
	}
	if m.mac.IsMulticast() {
		return fmt.Errorf("multicast TAP MAC %s", m.mac)
	}
	if !m.ports.valid() {
		return fmt.Errorf("source ports beyond 65535 (from %d, mask %#x)", m.ports.First, m.ports.Mask)
	}
	if len(m.vnis) == 0 || len(m.vnis) > maxVNIs {
		return fmt.Errorf("%d VNIs, want 1 to %d", len(m.vnis), maxVNIs)
	}
	for i, v := range m.vnis {
		if !v.Valid() {
			return fmt.Errorf("invalid VNI %d", v)
		}
		if slices.Contains(m.vnis[:i], v) {
			return fmt.Errorf("VNI %d twice", v)
		}
	}
	return checkPins(m.macs, m.addrs, m.vnis)
}
