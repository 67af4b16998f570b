package node

// The node's edges, as wireguard-go's device takes a tun.Device and a
// conn.Bind: it opens its TAP queues through a TAPOpener and its underlay
// sockets through an Underlay (Config.TAPs, Config.Underlay), the kernel's
// by default. The engines see only tap.Device and encap.Transport. What the
// node asks of a kernel TAP or socket beyond them (whether it created the
// TAP, its offloads and drops, GRO and busy polling, a descriptor for a
// handover) is optional: a device without it, such as a test's in-memory
// one (tap/taptest, encap/encaptest), is taken as a plain one that no
// start created, with no offloads, that cannot be handed over. The kernel's
// devices keep their concrete types, so the hot path is unchanged.

import (
	"errors"
	"net/netip"
	"os"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/tap"
)

// TAPOpener opens a segment's TAP queues, as tap.OpenQueues does (the
// default): at least one, at most cfg.Queues.
type TAPOpener interface {
	OpenTAP(cfg tap.Config) ([]tap.Device, error)
}

// Underlay opens the underlay's UDP sockets, as encap.ListenUDP does (the
// default). A taken address fails with an error that wraps
// unix.EADDRINUSE.
type Underlay interface {
	ListenUDP(addr netip.AddrPort, opts encap.UDPOptions) (encap.Transport, error)
}

// kernel opens the kernel's TAPs and sockets.
type kernel struct{}

func (kernel) OpenTAP(cfg tap.Config) ([]tap.Device, error) {
	devs, err := tap.OpenQueues(cfg)
	out := make([]tap.Device, len(devs))
	for i, d := range devs {
		out[i] = d
	}
	return out, err
}

func (kernel) ListenUDP(addr netip.AddrPort, opts encap.UDPOptions) (encap.Transport, error) {
	c, err := encap.ListenUDP(addr, opts)
	if err != nil {
		return nil, err // not a non-nil interface holding a nil *UDPConn
	}
	return c, nil
}

// tapQueue is one TAP queue of a segment: a *tap.TAP, or a plainTAP.
type tapQueue interface {
	tap.Device
	Created() bool // made by this start
	Owned() bool   // uvxlan's (made by this start or an earlier one)
	Offloads() string
	OffloadDrops() uint64
	PartialChecksums() uint64
	QueueDrops() (uint64, error)
	File() (*os.File, error)
}

// udpSocket is one underlay socket: a *encap.UDPConn, or a plainSocket.
type udpSocket interface {
	encap.Transport
	DisableGRO() error
	SetBusyPoll(time.Duration)
	GSO() bool
	File() (*os.File, error)
}

var (
	_ tapQueue  = (*tap.TAP)(nil)
	_ udpSocket = (*encap.UDPConn)(nil)
)

var errNotKernel = errors.New("takeover: not a kernel device: it cannot be handed over")

// plainTAP is a tap.Device with nothing more.
type plainTAP struct{ tap.Device }

func (plainTAP) Created() bool               { return false }
func (plainTAP) Owned() bool                 { return false }
func (plainTAP) Offloads() string            { return "" }
func (plainTAP) OffloadDrops() uint64        { return 0 }
func (plainTAP) PartialChecksums() uint64    { return 0 }
func (plainTAP) QueueDrops() (uint64, error) { return 0, errNotKernel }
func (plainTAP) File() (*os.File, error)     { return nil, errNotKernel }

// plainSocket is an encap.Transport with nothing more.
type plainSocket struct{ encap.Transport }

func (plainSocket) DisableGRO() error         { return nil }
func (plainSocket) SetBusyPoll(time.Duration) {}
func (plainSocket) GSO() bool                 { return false }
func (plainSocket) File() (*os.File, error)   { return nil, errNotKernel }

// PathMTU passes through to a transport that knows path MTUs, as the
// engines ask of their senders.
func (s plainSocket) PathMTU(dst netip.Addr) int {
	if p, ok := s.Transport.(interface{ PathMTU(netip.Addr) int }); ok {
		return p.PathMTU(dst)
	}
	return 0
}

// openTAP opens a segment's queues with the configured opener.
func (n *Node) openTAP(cfg tap.Config) ([]tapQueue, error) {
	devs, err := n.cfg.TAPs.OpenTAP(cfg)
	return tapQueues(devs, err)
}

// tapQueues are devs as tapQueues.
func tapQueues[D tap.Device](devs []D, err error) ([]tapQueue, error) {
	if err != nil {
		return nil, err
	}
	out := make([]tapQueue, len(devs))
	for i, d := range devs {
		q, ok := any(d).(tapQueue)
		if !ok {
			q = plainTAP{d}
		}
		out[i] = q
	}
	return out, nil
}

// listenUDP opens an underlay socket with the configured underlay.
func (n *Node) listenUDP(addr netip.AddrPort, opts encap.UDPOptions) (udpSocket, error) {
	t, err := n.cfg.Underlay.ListenUDP(addr, opts)
	if err != nil {
		return nil, err
	}
	if s, ok := t.(udpSocket); ok {
		return s, nil
	}
	return plainSocket{t}, nil
}
