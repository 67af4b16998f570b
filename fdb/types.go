package fdb

import (
	"errors"
	"fmt"
	"net"
	"time"

	"net/netip"
)

// VNI is a 24-bit VXLAN Network Identifier (RFC 7348 §5).
type VNI uint32

// MaxVNI is the largest VNI that fits the 24-bit field.
const MaxVNI VNI = 1<<24 - 1

// Valid reports whether v is in 1..16777215. VNI 0 is refused as a
// configuration value: it is easy to get by accident and means nothing.
func (v VNI) Valid() bool { return v >= 1 && v <= MaxVNI }

// MAC is an Ethernet address. Unlike net.HardwareAddr it is comparable and
// can be a map key without allocating.
type MAC [6]byte

// ErrBadMAC is returned by ParseMAC for anything that is not a 48-bit MAC.
var ErrBadMAC = errors.New("not a 48-bit MAC address")

// ParseMAC parses "aa:bb:cc:dd:ee:ff" (and the other forms net.ParseMAC
// accepts) into a MAC.
func ParseMAC(s string) (MAC, error) {
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return MAC{}, fmt.Errorf("%q: %w", s, ErrBadMAC)
	}
	return MAC(hw), nil
}

// String formats m as "aa:bb:cc:dd:ee:ff".
func (m MAC) String() string { return net.HardwareAddr(m[:]).String() }

// MarshalText implements encoding.TextMarshaler (JSON shows "aa:bb:...").
func (m MAC) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *MAC) UnmarshalText(b []byte) error {
	v, err := ParseMAC(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// IsMulticast reports whether the group bit is set (this includes broadcast).
func (m MAC) IsMulticast() bool { return m[0]&1 == 1 }

// IsZero reports whether m is 00:00:00:00:00:00.
func (m MAC) IsZero() bool { return m == MAC{} }

// Origin says where an FDB entry came from.
type Origin uint8

const (
	// OriginLocal is the agent's own TAP MAC.
	OriginLocal Origin = iota + 1
	// OriginStatic was configured by the operator.
	OriginStatic
	// OriginLearned was learned from the outer source of a received frame.
	OriginLearned
	// OriginGossip was announced by the node that owns it, through gossip.
	OriginGossip
	// OriginEVPN was advertised by a BGP EVPN speaker (a fabric's VTEP:
	// FRR, a switch) in a type-2 route. It ranks below gossip: a key a
	// member announces is the member's, whatever a BGP peer says.
	OriginEVPN
)

// String returns the name used in `fdb show` and JSON: local, static,
// learned, gossip, evpn.
func (o Origin) String() string {
	switch o {
	case OriginLocal:
		return "local"
	case OriginStatic:
		return "static"
	case OriginLearned:
		return "learned"
	case OriginGossip:
		return "gossip"
	case OriginEVPN:
		return "evpn"
	}
	return fmt.Sprintf("origin(%d)", uint8(o))
}

// MarshalText implements encoding.TextMarshaler.
func (o Origin) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (o *Origin) UnmarshalText(b []byte) error {
	for _, c := range []Origin{OriginLocal, OriginStatic, OriginLearned, OriginGossip, OriginEVPN} {
		if c.String() == string(b) {
			*o = c
			return nil
		}
	}
	return fmt.Errorf("unknown origin %q", b)
}

// Entry is one row of the FDB as shown to users. It is a copy: changing it
// changes nothing in the table.
type Entry struct {
	VNI    VNI            `json:"vni"`
	MAC    MAC            `json:"mac"`
	VTEP   netip.AddrPort `json:"vtep"`
	Origin Origin         `json:"origin"`
	// Reserved: a member's TAP MAC, held in the table's reserve (see
	// Config.Reserve), which other entries cannot take.
	Reserved bool `json:"reserved,omitempty"`
	// Updated is when the entry was added, moved or (for learned entries)
	// last seen.
	Updated time.Time `json:"updated"`
}
