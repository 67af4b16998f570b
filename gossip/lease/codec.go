package lease

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
)

// The wire format. The IPv4 leases travel as the gossip extension of type
// extType, the IPv6 ones as that of type extType6: gossip puts that byte
// before each broadcast, and frames the push/pull section and the metadata
// (see gossip's extension.go); what is inside is ours. All integers are
// big endian.
//
//	records:  count (4) | lease × count     (a broadcast: one lease; a push/pull section: all of them)
//	lease:    flags (1) | version (8) | owner length (1) | owner
//	          | subnet address length (1) = 4 (extType) or 16 (extType6) | subnet address | subnet bits (1)
//	          | claim (8) | expires (8) | VTEP address length (1) = 4 or 16 | VTEP address | VTEP port (2) | MAC (6)
//	flags:    bit 0 = deleted (a tombstone); the other bits must be 0.
//
//	metadata: network address (4 or 16) | network bits (1) | subnet length (1)
//
// extType's push/pull section is the records; its metadata, the IPv4
// network's. extType6 has no metadata (members of releases before it must
// accept a dual-stack node, and refuse a node whose metadata has a section
// they do not know): its push/pull section is the IPv6 network's metadata,
// then the records (see "Two families" in lease.go).
//
// The decoders are strict: a valid owner name, a masked subnet of the
// extension's family, a usable VTEP, a unicast MAC, no unknown flags, no
// trailing bytes, at most maxLeases leases. So the encoding is canonical:
// whatever decodes re-encodes to the same bytes.

// extType is the IPv4 leases' gossip extension type, extType6 the IPv6
// ones'. (gossip.MinExtensionType+2 is --encrypt's, +3 is left to tests.)
const (
	extType  byte = gossip.MinExtensionType
	extType6 byte = gossip.MinExtensionType + 4
)

const (
	flagDeleted = 1 << 0
	// minLeaseLen is the smallest encoded lease.
	minLeaseLen = 1 + 8 + 1 + 1 + 1 + 4 + 1 + 8 + 8 + 1 + 4 + 2 + 6
	// metaLen and metaLen6 are the lengths of the metadata.
	metaLen  = 4 + 1 + 1
	metaLen6 = 16 + 1 + 1
)

// errDecode is wrapped by every decoding error.
var errDecode = errors.New("bad lease message")

func appendRecords(b []byte, recs []record) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(recs)))
	for i := range recs {
		r := &recs[i]
		var flags byte
		if r.deleted {
			flags |= flagDeleted
		}
		b = append(b, flags)
		b = binary.BigEndian.AppendUint64(b, r.version)
		b = append(b, byte(len(r.owner)))
		b = append(b, r.owner...)
		b = appendAddr(b, r.subnet.Addr())
		b = append(b, byte(r.subnet.Bits()))
		b = binary.BigEndian.AppendUint64(b, r.claim)
		b = binary.BigEndian.AppendUint64(b, r.expires)
		b = appendAddr(b, r.vtep.Addr())
		b = binary.BigEndian.AppendUint16(b, r.vtep.Port())
		b = append(b, r.mac[:]...)
	}
	return b
}

func appendAddr(b []byte, a netip.Addr) []byte {
	raw := a.AsSlice()
	b = append(b, byte(len(raw)))
	return append(b, raw...)
}

// decodeRecords decodes what appendRecords made: IPv6 subnets when v6,
// IPv4 ones otherwise. The records own their memory (nothing refers to b).
// Errors wrap errDecode.
func decodeRecords(b []byte, v6 bool) ([]record, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %w", errDecode, io.ErrUnexpectedEOF)
	}
	n := binary.BigEndian.Uint32(b)
	if n > maxLeases || int(n) > len(b[4:])/minLeaseLen {
		return nil, fmt.Errorf("%w: %d leases in %d bytes", errDecode, n, len(b)-4)
	}
	r := gossip.NewReader(b[4:])
	recs := make([]record, n)
	for i := range recs {
		l := &recs[i]
		flags := r.U8()
		l.deleted = flags&flagDeleted != 0
		l.version = r.U64()
		l.owner = string(r.Next(int(r.U8())))
		a := r.Addr()
		bits := int(r.U8())
		l.claim = r.U64()
		l.expires = r.U64()
		va := r.Addr()
		l.vtep = netip.AddrPortFrom(va, r.U16())
		l.mac = fdb.MAC(r.Next(6))
		if r.Err() != nil {
			return nil, fmt.Errorf("%w: lease %d: %w", errDecode, i, r.Err())
		}
		var err error
		switch {
		case flags&^flagDeleted != 0:
			err = fmt.Errorf("unknown flags %#x", flags)
		case !gossip.ValidName(l.owner):
			err = fmt.Errorf("bad owner name %q", l.owner)
		case !v6 && (!a.Is4() || bits > 32):
			err = fmt.Errorf("subnet %s/%d is not an IPv4 prefix", a, bits)
		case v6 && (!a.Is6() || bits > 128):
			err = fmt.Errorf("subnet %s/%d is not an IPv6 prefix", a, bits)
		case !fdb.ValidVTEP(l.vtep):
			err = fmt.Errorf("unusable VTEP %s", l.vtep)
		case l.mac.IsZero() || l.mac.IsMulticast():
			err = fmt.Errorf("MAC %s is zero or multicast", l.mac)
		}
		if err == nil {
			l.subnet = netip.PrefixFrom(a, bits)
			if l.subnet != l.subnet.Masked() {
				err = fmt.Errorf("subnet %s has host bits set", l.subnet)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%w: lease %d: %w", errDecode, i, err)
		}
	}
	if len(r.Rest()) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errDecode, len(r.Rest()))
	}
	return recs, nil
}

// appendMeta appends the metadata of the network configuration.
func appendMeta(b []byte, network netip.Prefix, subnetLen int) []byte {
	return append(append(b, network.Addr().AsSlice()...), byte(network.Bits()), byte(subnetLen))
}

// decodeMeta decodes what appendMeta made, of an IPv6 network when v6, and
// checks it as Config.Check would. Errors wrap errDecode.
func decodeMeta(b []byte, v6 bool) (network netip.Prefix, subnetLen int, err error) {
	n, maxLen := metaLen, MaxSubnetLen4
	if v6 {
		n, maxLen = metaLen6, MaxSubnetLen6
	}
	if len(b) != n {
		return netip.Prefix{}, 0, fmt.Errorf("%w: metadata of %d bytes, want %d", errDecode, len(b), n)
	}
	a, _ := netip.AddrFromSlice(b[:n-2])
	bits, sublen := int(b[n-2]), int(b[n-1])
	if bits > a.BitLen() || sublen <= bits || sublen > maxLen || sublen-bits > maxIndexBits {
		return netip.Prefix{}, 0, fmt.Errorf("%w: network /%d with /%d subnets", errDecode, bits, sublen)
	}
	network = netip.PrefixFrom(a, bits)
	if network != network.Masked() {
		return netip.Prefix{}, 0, fmt.Errorf("%w: network %s has host bits set", errDecode, network)
	}
	return network, sublen, nil
}
