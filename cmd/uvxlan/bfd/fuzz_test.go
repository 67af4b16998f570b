package bfd

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// Anything that unmarshals marshals back to the same 24 bytes.
func FuzzHeader(f *testing.F) {
	f.Add(packet(header{State: Up, MyDisc: 1, YourDisc: 2, Poll: true}))
	f.Add(packet(header{State: AdminDown, Diag: 31, Auth: true, Demand: true, CPI: true, Multipoint: true, Final: true}))
	f.Add([]byte{0x20, 0x40, 3, 24})
	f.Fuzz(func(t *testing.T, b []byte) {
		var h header
		if err := h.unmarshal(b); err != nil {
			if len(b) >= headerLen {
				t.Fatalf("unmarshal of %d bytes: %v", len(b), err)
			}
			return
		}
		out := make([]byte, headerLen)
		if n := h.marshalTo(out); n != headerLen || !bytes.Equal(out, b[:headerLen]) {
			t.Fatalf("round trip:\n %x\n %x", b[:headerLen], out)
		}
	})
}

// Random payloads into a Manager with sessions: Receive never panics,
// every packet is counted once (accepted or dropped by one reason), and
// the sessions stay well-formed.
func FuzzReceive(f *testing.F) {
	m, err := New(Config{Send: func(netip.Addr, uint16, []byte) {}})
	if err != nil {
		f.Fatal(err)
	}
	peers := []netip.Addr{
		netip.MustParseAddr("192.0.2.1"),
		netip.MustParseAddr("192.0.2.2"),
		netip.MustParseAddr("2001:db8::1"),
		netip.MustParseAddr("192.0.2.99"), // no session
	}
	for _, p := range peers[:3] {
		if err := m.Add(p, [6]byte{}); err != nil {
			f.Fatal(err)
		}
	}
	discs := map[netip.Addr]uint32{}
	for _, s := range m.Sessions() {
		discs[s.Peer] = s.LocalDisc
	}
	f.Add(byte(0), uint8(255), packet(header{State: Down, MyDisc: 7}))
	f.Add(byte(1), uint8(255), packet(header{State: Init, MyDisc: 7}))
	f.Add(byte(0x11), uint8(255), packet(header{State: Up, MyDisc: 7, Poll: true}))
	f.Add(byte(0x21), uint8(255), packet(header{State: AdminDown, MyDisc: 8}))
	f.Add(byte(0), uint8(254), packet(header{State: Down, MyDisc: 7}))
	f.Add(byte(0x31), uint8(255), packet(header{State: Down, MyDisc: 7, Auth: true}))
	f.Add(byte(0), uint8(255), []byte{})
	var calls uint64
	f.Fuzz(func(t *testing.T, sel byte, ttl uint8, payload []byte) {
		src := peers[int(sel>>4)%len(peers)]
		if sel&1 != 0 && len(payload) >= 12 {
			// Aim at a session: its discriminator as Your Discriminator.
			payload = bytes.Clone(payload)
			binary.BigEndian.PutUint32(payload[8:], discs[peers[int(sel>>1&7)%3]])
		}
		m.Receive(src, 49152, ttl, payload)
		calls++
		st := m.Stats()
		sum := st["rx_packets"]
		for c := range NumCounters {
			if d := c.Desc(); d.Kind == KindDrop {
				sum += st[d.Name]
			}
		}
		if sum != calls {
			t.Fatalf("%d packets received, %d counted: %v", calls, sum, st)
		}
		ss := m.Sessions()
		if len(ss) != 3 {
			t.Fatalf("%d sessions, want 3", len(ss))
		}
		for _, s := range ss {
			if s.State != Down && s.State != Init && s.State != Up {
				t.Fatalf("session %+v in state %v", s, s.State)
			}
			if s.State == Up && s.RemoteDisc == 0 {
				t.Fatalf("session %+v Up without a remote discriminator", s)
			}
		}
	})
}
