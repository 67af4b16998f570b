package encap

import (
	"encoding/binary"
	"testing"
)

// ipv4TCP builds an Ethernet+IPv4+TCP frame header for flow hashing tests.
func ipv4TCP(src, dst [4]byte, sport, dport uint16, fragOff uint16, payload byte) []byte {
	f := make([]byte, 14+20+20+1)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[6:], fragOff)
	ip[9] = 6
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[20:], sport)
	binary.BigEndian.PutUint16(ip[22:], dport)
	f[len(f)-1] = payload
	return f
}

func TestFlowHash(t *testing.T) {
	a, b := [4]byte{10, 42, 0, 1}, [4]byte{10, 42, 0, 2}
	same1 := flowHash(ipv4TCP(a, b, 40000, 5201, 0, 1))
	same2 := flowHash(ipv4TCP(a, b, 40000, 5201, 0, 2))
	if same1 != same2 {
		t.Errorf("one flow, two payloads: hashes %#x and %#x differ", same1, same2)
	}
	// Non-first fragments carry no ports; they must hash like the
	// addresses-and-protocol of the flow regardless of what sits where the
	// ports would be.
	if flowHash(ipv4TCP(a, b, 1, 2, 100, 0)) != flowHash(ipv4TCP(a, b, 3, 4, 100, 0)) {
		t.Error("non-first fragments hash differently by payload bytes")
	}
	// 64 flows that differ only in source port spread over 8 sockets.
	buckets := map[uint32]bool{}
	for p := range 64 {
		buckets[flowHash(ipv4TCP(a, b, uint16(40000+p), 5201, 0, 0))%8] = true
	}
	if len(buckets) < 6 {
		t.Errorf("64 flows fell into %d of 8 buckets, want at least 6", len(buckets))
	}
}

// FuzzFlowHash: any frame of at least an Ethernet header hashes without
// panicking, whatever its EtherType and lengths claim.
func FuzzFlowHash(f *testing.F) {
	f.Add(ipv4TCP([4]byte{1, 2, 3, 4}, [4]byte{5, 6, 7, 8}, 1, 2, 0, 0))
	f.Add(make([]byte, 14))
	v6 := make([]byte, 14+40+4)
	binary.BigEndian.PutUint16(v6[12:], 0x86dd)
	v6[14] = 0x60
	v6[14+6] = 17
	f.Add(v6)
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) < ethHeaderLen {
			return
		}
		flowHash(frame)
	})
}
