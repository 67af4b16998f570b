package bfd

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// A packet FRR 8.4's bfdd sent (TestFRRInterop logs one): Up with Poll,
// ending its slow start, Required Min Echo RX 50 ms.
const frrPoll = "20e00318565ef47d52e84c1e000493e0000493e00000c350"

func TestHeaderGolden(t *testing.T) {
	b, _ := hex.DecodeString(frrPoll)
	var h header
	if err := h.unmarshal(b); err != nil {
		t.Fatal(err)
	}
	want := header{Version: 1, State: Up, Poll: true, DetectMult: 3, Length: 24,
		MyDisc: 0x565ef47d, YourDisc: 0x52e84c1e, DesiredMinTx: 300_000, RequiredMinRx: 300_000, RequiredMinEchoRx: 50_000}
	if h != want {
		t.Errorf("decoded\n %+v\nwant\n %+v", h, want)
	}
	if r := parse(&h, b, 255); r != ok {
		t.Errorf("parse: dropped as %v", r)
	}
	out := make([]byte, headerLen)
	h.marshalTo(out)
	if !bytes.Equal(out, b) {
		t.Errorf("marshal: %x, want %x", out, b)
	}
	// Each flag bit lands where RFC 5880 §4.1 puts it.
	for _, tc := range []struct {
		set  func(*header)
		byte uint8
	}{
		{func(h *header) { h.Poll = true }, 0x20},
		{func(h *header) { h.Final = true }, 0x10},
		{func(h *header) { h.CPI = true }, 0x08},
		{func(h *header) { h.Auth = true }, 0x04},
		{func(h *header) { h.Demand = true }, 0x02},
		{func(h *header) { h.Multipoint = true }, 0x01},
		{func(h *header) { h.State = AdminDown }, 0x00},
		{func(h *header) { h.State = Init }, 0x80},
	} {
		var h header
		h.State = Down
		tc.set(&h)
		h.marshalTo(out)
		want := tc.byte
		if h.State == Down {
			want |= 0x40
		}
		if out[1] != want {
			t.Errorf("%+v: byte 1 is %#x, want %#x", h, out[1], want)
		}
	}
	(&header{Version: 1, Diag: DiagNeighborDown}).marshalTo(out)
	if out[0] != 0x23 {
		t.Errorf("version 1, diag 3: byte 0 is %#x, want 0x23", out[0])
	}
}

// Receive of a packet that changes no state, and of one dropped, does not
// allocate, as its comment says.
func TestReceiveAllocs(t *testing.T) {
	f := newFabric()
	a := f.add(t, "192.0.2.1", Config{})
	b := f.add(t, "192.0.2.2", Config{})
	a.m.Add(b.addr, [6]byte{})
	my := a.m.Sessions()[0].LocalDisc
	a.m.Receive(b.addr, 49152, 255, packet(header{State: Init, MyDisc: 5, YourDisc: my}))
	if a.state(b) != Up {
		t.Fatalf("a is %v, want up", a.state(b))
	}
	up := packet(header{State: Up, MyDisc: 5, YourDisc: my})
	if n := testing.AllocsPerRun(100, func() { a.m.Receive(b.addr, 49152, 255, up) }); n != 0 {
		t.Errorf("Receive of an Up packet: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() { a.m.Receive(b.addr, 49152, 64, up) }); n != 0 {
		t.Errorf("Receive of a dropped packet: %v allocations", n)
	}
}
