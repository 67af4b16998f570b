package encap

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/tap"
)

// partialDev is a fakeDev whose reads, like a TAP's with offloads, may
// leave checksums partial once asked to.
type partialDev struct {
	*fakeDev
	asked bool
}

func (d *partialDev) LeavePartial() bool { d.asked = true; return true }

// partialUDP returns a UDP frame from macA to dst with a right checksum,
// and the same frame with the checksum left partial (the pseudo-header
// sum, as the kernel leaves it for the TAP).
func partialUDP(t testing.TB, dst fdb.MAC, v4 bool) (full, part []byte) {
	src, to := ip6A, ip6B
	if v4 {
		src, to = ip4A, ip4B
	}
	full = gopacketIP(t, dst, macA, src, to, true, 1000)
	part = bytes.Clone(full)
	l4 := ethHeaderLen + 40
	var ph uint64
	if v4 {
		l4 = ethHeaderLen + 20
		ph = tap.PseudoHeaderIPv4(src.As4(), to.As4(), 17, uint16(len(full)-l4))
	} else {
		ph = tap.PseudoHeaderIPv6(src.As16(), to.As16(), 17, uint32(len(full)-l4))
	}
	binary.BigEndian.PutUint16(part[l4+6:], tap.FoldChecksum(ph))
	if bytes.Equal(full, part) {
		t.Fatal("the test frame's right checksum is its partial one")
	}
	return full, part
}

// sent returns the frames tb holds to send, whole (headers and tail), by
// destination.
func sent(tb *txBatch) map[netip.AddrPort][][]byte {
	out := map[netip.AddrPort][][]byte{}
	for _, msgs := range tb.out {
		for _, m := range msgs {
			out[m.Addr] = append(out[m.Addr], append(bytes.Clone(m.Buf[HeaderLen:m.N]), m.Tail...))
		}
	}
	return out
}

// The sender's decision: with EngineConfig.Partial, the engine has its TAP
// leave checksums partial; a frame left partial goes so to a VTEP that
// takes it (counted), and is completed for a VTEP that does not, and when
// flooded; a frame with a full checksum goes as it is. Without Partial the
// TAP is not asked. Nothing allocates.
func TestEnginePartialChecksums(t *testing.T) {
	var n fakeNet
	conn := n.listen(vtepA)
	table := fdb.New(fdb.Config{})
	table.SetFlood(testVNI, []netip.AddrPort{vtepB, vtepC})
	table.Learn(testVNI, macB, vtepB)
	table.Learn(testVNI, macC, vtepC)
	var peers PartialPeers
	peers.Set(map[netip.AddrPort]struct{}{vtepB: {}})

	plain := &partialDev{fakeDev: newFakeDev(macA)}
	if _, err := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789}, plain, conn, []Transport{conn}, table); err != nil || plain.asked {
		t.Fatalf("without Partial: NewEngine %v, TAP asked to leave checksums partial %v", err, plain.asked)
	}
	dev := &partialDev{fakeDev: newFakeDev(macA)}
	e, err := NewEngine(EngineConfig{VNI: testVNI, MAC: macA, Local: vtepA.Addr(), Port: 4789, Partial: &peers}, dev, conn, []Transport{conn}, table)
	if err != nil || !dev.asked {
		t.Fatalf("with Partial: NewEngine %v, TAP asked %v", err, dev.asked)
	}

	for _, v4 := range []bool{true, false} {
		for _, c := range []struct {
			desc    string
			dst     fdb.MAC
			partial bool
			want    map[netip.AddrPort]bool // destination → partial on the wire
			counted uint64
		}{
			{"to a member that takes them", macB, true, map[netip.AddrPort]bool{vtepB: true}, 1},
			{"to a VTEP that does not", macC, true, map[netip.AddrPort]bool{vtepC: false}, 0},
			{"flooded", fdb.MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, true, map[netip.AddrPort]bool{vtepB: false, vtepC: false}, 0},
			{"full, to a member that takes them", macB, false, map[netip.AddrPort]bool{vtepB: false}, 0},
		} {
			full, part := partialUDP(t, c.dst, v4)
			in := full
			if c.partial {
				in = part
			}
			hdrs := ethHeaderLen + 40 + 8
			if v4 {
				hdrs = ethHeaderLen + 20 + 8
			}
			for _, cut := range []int{len(in), hdrs} { // whole, or headers and a tail
				pkt := append(make([]byte, Headroom), in[:cut]...)
				tail := bytes.Clone(in[cut:])
				if cut == len(in) {
					tail = nil
				}
				before := e.Stats().Get(TxPartialCsum)
				tb := e.newTxBatch(4)
				e.route(pkt, tail, tb)
				got := sent(tb)
				if len(got) != len(c.want) {
					t.Fatalf("v4 %v, %s, cut %d: sent to %d VTEPs, want %d", v4, c.desc, cut, len(got), len(c.want))
				}
				for vtep, wantPartial := range c.want {
					want := full
					if wantPartial {
						want = part
					}
					if len(got[vtep]) != 1 || !bytes.Equal(got[vtep][0], want) {
						t.Errorf("v4 %v, %s, cut %d: to %s the frame is not the %s one", v4, c.desc, cut, vtep, map[bool]string{true: "partial", false: "full"}[wantPartial])
					}
				}
				if d := e.Stats().Get(TxPartialCsum) - before; d != c.counted {
					t.Errorf("v4 %v, %s, cut %d: tx_partial_checksums +%d, want +%d", v4, c.desc, cut, d, c.counted)
				}
			}
		}
	}

	_, part := partialUDP(t, macB, true)
	_, partC := partialUDP(t, macC, true)
	toB := append(make([]byte, Headroom), part...)
	toC := append(make([]byte, Headroom), partC...)
	tb := e.newTxBatch(4)
	if allocs := testing.AllocsPerRun(1000, func() {
		tb.reset()
		copy(toC[Headroom:], partC) // completed by the previous run
		e.route(toB, nil, tb)
		e.route(toC, nil, tb)
	}); allocs != 0 {
		t.Errorf("partial checksums on the transmit path: %v allocs per run, want 0", allocs)
	}
}
