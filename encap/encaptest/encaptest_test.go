package encaptest

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/encap"
)

// Datagrams go by address with their source; a taken address is refused
// unless every socket on it asks for SO_REUSEPORT; a closed Conn reads
// net.ErrClosed and its address is free again.
func TestNetwork(t *testing.T) {
	var n Network
	a1, b1 := netip.MustParseAddrPort("198.18.0.1:4789"), netip.MustParseAddrPort("198.18.0.2:4789")
	a, err := n.Listen(a1, false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Listen(b1, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.ListenUDP(a1, encap.UDPOptions{}); !errors.Is(err, unix.EADDRINUSE) {
		t.Errorf("a second socket on %s: %v, want EADDRINUSE", a1, err)
	}
	sent, err := a.WriteBatch([]encap.Message{{Buf: []byte("head"), N: 4, Tail: []byte("tail"), Addr: b1}, {Buf: []byte("x"), N: 1, Addr: b1}})
	if sent != 2 || err != nil {
		t.Fatalf("WriteBatch: %d, %v", sent, err)
	}
	msgs := []encap.Message{{Buf: make([]byte, 64)}, {Buf: make([]byte, 64)}, {Buf: make([]byte, 64)}}
	got, err := b.ReadBatch(msgs)
	if got != 2 || err != nil || string(msgs[0].Buf[:msgs[0].N]) != "headtail" || msgs[0].Addr != a1 || string(msgs[1].Buf[:msgs[1].N]) != "x" {
		t.Errorf("ReadBatch: %d, %v: %q from %s, %q", got, err, msgs[0].Buf[:msgs[0].N], msgs[0].Addr, msgs[1].Buf[:msgs[1].N])
	}
	b.Close()
	if _, err := b.ReadBatch(msgs); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadBatch after Close: %v", err)
	}
	a.Send(b1, []byte("lost")) // nobody there: lost, no error
	r1, err := n.Listen(b1, true)
	if err != nil {
		t.Fatalf("the closed address is not free: %v", err)
	}
	if _, err := n.Listen(b1, true); err != nil {
		t.Errorf("two SO_REUSEPORT sockets: %v", err)
	}
	r1.Close()
}
