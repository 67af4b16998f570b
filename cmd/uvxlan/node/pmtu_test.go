package node

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
)

// Issue 26, row 12: path MTU probes were answered without a limit (171k
// acks in 5 s at 77% of a core). A member's probes are answered only when
// they are addressed to our probe MAC (the TAP MAC of our metadata), and at
// most pmtuAnswerBurst at once and pmtuAnswerRate a second per member; the
// others are counted.
func TestPMTUProbeFlood(t *testing.T) {
	ours, theirs := fdb.MAC{2, 0, 0, 0, 0, 1}, fdb.MAC{2, 0, 0, 0, 0, 2}
	rcv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	go io.Copy(io.Discard, rcv)
	vtep := rcv.LocalAddr().(*net.UDPAddr).AddrPort()
	member := gossip.Member{Name: "m", State: "alive", VTEP: vtep, VNIs: []fdb.VNI{42}, MAC: theirs}

	n := &Node{cfg: Config{Local: netip.MustParseAddr("127.0.0.1")}, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		segs: []*segment{{cfg: Segment{VNI: 42}, mac: ours}}}
	p := newPMTUProber(n)
	p.members = func() []gossip.Member { return []gossip.Member{member} }
	n.pmtu = p
	if p.conn, err = listenProbe(n.cfg.Local); err != nil {
		t.Fatal(err)
	}
	defer p.conn.Close()
	p.due(time.Now())

	probe := func(dst fdb.MAC, nonce uint64) encap.PMTUReport {
		return encap.PMTUReport{VNI: 42, From: netip.AddrPortFrom(vtep.Addr(), 40000), Dst: dst, Len: 1400,
			Msg: encap.PMTUMessage{Kind: encap.PMTUProbe, Size: 1428, Nonce: nonce}}
	}
	const flood = 5000
	for i := range 500 { // not for our probe MAC
		p.handle(probe(fdb.MAC{2, 0, 0, 0, 9, byte(i)}, uint64(i)))
	}
	if got := p.answered.Load(); got != 0 {
		t.Errorf("%d probes for another MAC answered, want none", got)
	}
	start := time.Now()
	for i := range flood {
		p.handle(probe(ours, uint64(i)))
	}
	elapsed := time.Since(start)
	answered := p.answered.Load()
	most := uint64(pmtuAnswerBurst + float64(pmtuAnswerRate)*elapsed.Seconds() + 1)
	t.Logf("%d of %d probes answered in %v", answered, flood, elapsed)
	if answered > most || answered == 0 {
		t.Errorf("%d probes answered in %v, want 1 to %d", answered, elapsed, most)
	}
	if got, want := n.counters().PMTUProbesRefused, uint64(500+flood)-answered; got != want {
		t.Errorf("PMTUProbesRefused = %d, want %d", got, want)
	}
}
