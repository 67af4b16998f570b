package tap

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/songgao/water"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Config says which TAP to open and how to set it up.
type Config struct {
	// Name of the interface. An existing TAP of that name is attached to
	// (and left in place on Close); otherwise a new one is created and
	// removed on Close, unless Persist.
	Name string
	// Persist makes a TAP that Open creates persistent: it outlives the
	// process (a crash leaves it with its addresses, routes and bridge
	// membership, and the next Open attaches to it), and it is marked as
	// uvxlan's (its alias, ifalias, is OwnerAlias) so that Owned can tell
	// it from a TAP someone else made. Remove deletes it.
	Persist bool
	// MAC to set; nil keeps the kernel's random address.
	MAC net.HardwareAddr
	// MTU to set; 0 keeps the current one.
	MTU int
	// Addrs are added to the interface (an address already present is fine).
	Addrs []netip.Prefix
	// BatchSize is the most frames one Read returns; default 64, and 128
	// with Offload.
	BatchSize int
	// Offload opens the TAP with a virtio-net header (IFF_VNET_HDR) and
	// turns on checksum, TSO4/6 and (where the kernel has them) USO4/6
	// offloads: the kernel then hands over TCP and UDP super-frames of up to
	// 64 KB, which Read splits into MTU-sized frames (GSOSplit), and Write
	// coalesces consecutive segments of a flow into such super-frames
	// (GRO) so the kernel takes them in one writev, without copying them.
	// Device semantics do not change: Read returns MTU-sized frames. Write
	// may rewrite the headers of the frames it merges, and touches nothing
	// outside bufs[i][offset:].
	Offload bool
	// MaxSegments, with Offload, caps the segments in a super-frame the
	// kernel hands over (the TAP's gso_max_segs); 0 or more than BatchSize
	// means BatchSize. A caller that sends each super-frame on as one UDP
	// GSO send sets it to what one send carries, so that a super-frame
	// is not cut in two on the wire.
	MaxSegments int
	// Queues is the number of queues (IFF_MULTI_QUEUE) OpenQueues opens,
	// each a Device of its own that one goroutine reads and writes; the
	// kernel spreads flows over them. Default 1. More than 1 needs Offload.
	Queues int

	alias string // set by OpenQueues on a TAP it creates with Persist
}

// OwnerAlias is the interface alias (ip link's "alias") of a persistent TAP
// that uvxlan created.
const OwnerAlias = "uvxlan"

// Errors returned by Open when the host cannot give us a TAP.
var (
	ErrNoTUN       = errors.New("/dev/net/tun is missing: load the tun module (modprobe tun) or, in a container, pass the device through (--device /dev/net/tun)")
	ErrNoNetAdmin  = errors.New("permission denied: creating and configuring a TAP needs CAP_NET_ADMIN (run as root or grant the capability)")
	errNotTAPFile  = errors.New("tap: water returned a device that is not an *os.File")
	defaultBatches = 64
)

// TAP is a Linux TAP device opened through /dev/net/tun. It implements Device.
// One goroutine may Read while another Writes.
type TAP struct {
	// created: Open created the device; owned: it is uvxlan's (Persist).
	created, owned bool
	file           *os.File
	rc             syscall.RawConn
	closed         atomic.Bool
	name           string
	mac            net.HardwareAddr
	mtu            int
	batch          int

	// Scratch for the RawConn callbacks, built once so that Read and Write
	// do not allocate a closure per call.
	rd    func(fd uintptr) bool
	rBufs [][]byte
	rSize []int
	rOff  int
	rN    int
	rErr  error
	// rDrained: the last read system call found the TAP empty (EAGAIN).
	rDrained bool
	// tryRd and waitRd are TryRead's and WaitRead's callbacks; waitTry
	// is WaitRead's try.
	tryRd   func(fd uintptr)
	waitRd  func(fd uintptr) bool
	waitTry func() bool

	wr    func(fd uintptr) bool
	wBufs [][]byte
	wOff  int
	wN    int
	wErr  error

	// Offload (see Config.Offload).
	vnet    bool
	offload int // the TUN_F_* flags the kernel accepted
	// sbufs hold super-frames read from the TAP, with their virtio
	// headers: sbufs[sCur] is the one being read or split. A Read that
	// copies segments out uses sbufs[0] only; a TryRead that returns
	// segment payloads as tails (slices of these buffers) moves on to the
	// next buffer after each super-frame, and ends its batch when they are
	// all in use.
	sbufs   [][]byte
	sCur    int
	pending int      // bytes of sbufs[sCur] waiting to be split; 0: none
	rTails  [][]byte // TryRead's tails; nil: copy the segments
	gro     *GRO
	gFrames [][]byte   // Write's frames, for GRO
	gOut    []GROFrame // frames being written; nil between Writes
	gNext   int        // gOut[:gNext] are written
	zeroHdr [VirtioNetHdrLen]byte
	hdr     [VirtioNetHdrLen]byte // the header of the frame being written
	iovs    []unix.Iovec          // a frame being written: header, parts
	drops   atomic.Uint64         // super-frames that could not be split
	// partials counts frames written with a checksum their sender left
	// partial (partial.go).
	partials atomic.Uint64
	// leave: reads leave the checksums the kernel left for us partial
	// (LeavePartial).
	leave   bool
	kdrops0 uint64 // the kernel's tx_dropped of the device when opened
}

var (
	_ Device        = (*TAP)(nil)
	_ Poller        = (*TAP)(nil)
	_ PartialReader = (*TAP)(nil)
)

// Open creates (or attaches to) the TAP named cfg.Name, sets its MAC, MTU and
// addresses, and brings it up. cfg.Queues must be 0 or 1.
func Open(cfg Config) (*TAP, error) {
	if cfg.Queues > 1 {
		return nil, fmt.Errorf("tap: Open opens one queue; use OpenQueues for %d", cfg.Queues)
	}
	qs, err := OpenQueues(cfg)
	if err != nil {
		return nil, err
	}
	return qs[0], nil
}

// OpenQueues is Open for a multi-queue TAP: it opens cfg.Queues queues of
// one device. The device disappears (unless it existed before) when the
// last queue is closed.
func OpenQueues(cfg Config) ([]*TAP, error) {
	nq := max(cfg.Queues, 1)
	if nq > 1 && !cfg.Offload {
		return nil, fmt.Errorf("tap: %d queues need Offload", nq)
	}
	if nq > 256 {
		return nil, fmt.Errorf("tap: %d queues, the kernel allows 256", nq)
	}
	if cfg.Name == "" || len(cfg.Name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("tap: bad interface name %q (1 to %d characters)", cfg.Name, unix.IFNAMSIZ-1)
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return nil, fmt.Errorf("tap: %w", ErrNoTUN)
	}
	// water sets TUNSETPERSIST from Config.Persist: opening an existing
	// persistent TAP with Persist false would make it vanish on Close.
	link, lerr := netlink.LinkByName(cfg.Name)
	existed := lerr == nil
	if existed && link.Type() != "tuntap" {
		return nil, fmt.Errorf("tap: %s exists and is a %s device, not a TAP; choose another --dev", cfg.Name, link.Type())
	}
	var (
		f    *os.File
		name string
		err  error
		t    = &TAP{batch: cfg.BatchSize}
	)
	if cfg.Offload {
		f, name, t.offload, err = openVnet(cfg.Name, existed || cfg.Persist, nq > 1, true)
		t.vnet = true
		if t.batch <= 0 {
			t.batch = 2 * defaultBatches
		}
	} else {
		f, name, err = openWater(cfg.Name, existed || cfg.Persist)
	}
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("tap: open %s: %w", cfg.Name, ErrNoNetAdmin)
		}
		return nil, fmt.Errorf("tap: open %s: %w", cfg.Name, err)
	}
	t.file, t.name = f, name
	if t.batch <= 0 {
		t.batch = defaultBatches
	}
	t.created = !existed
	t.owned = !existed && cfg.Persist || existed && link.Attrs().Alias == OwnerAlias
	if !existed && cfg.Persist {
		cfg.alias = OwnerAlias
	}
	if err := t.setup(cfg); err != nil {
		f.Close()
		if t.created && cfg.Persist {
			Remove(cfg.Name)
		}
		return nil, err
	}
	if err := t.init(f); err != nil {
		return nil, err
	}
	qs := []*TAP{t}
	for len(qs) < nq {
		f, _, off, err := openVnet(t.name, true, true, false)
		if err != nil {
			for _, q := range qs {
				q.Close()
			}
			return nil, fmt.Errorf("tap: open queue %d of %s: %w", len(qs), t.name, err)
		}
		q := &TAP{name: t.name, mac: t.mac, mtu: t.mtu, batch: t.batch, vnet: true, offload: off}
		if err := q.init(f); err != nil {
			for _, q := range qs {
				q.Close()
			}
			return nil, err
		}
		qs = append(qs, q)
	}
	return qs, nil
}

// init gives t its file, and its buffers for offloads.
func (t *TAP) init(f *os.File) error {
	t.file = f
	if t.vnet {
		t.sbufs = make([][]byte, superBufs)
		for i := range t.sbufs {
			t.sbufs[i] = make([]byte, VirtioNetHdrLen+maxSuperFrame)
		}
		t.gro = NewGRO(t.batch)
		t.gro.SetUDP(t.offload&unix.TUN_F_USO4 != 0)
		t.gFrames = make([][]byte, t.batch)
		t.iovs = make([]unix.Iovec, t.batch+1)
	}
	var err error
	if t.rc, err = f.SyscallConn(); err != nil {
		f.Close()
		return fmt.Errorf("tap: %s: %w", t.name, err)
	}
	// Reads and writes are raw system calls (rawsys_linux.go), which must
	// never sleep: the descriptor has to be non-blocking.
	var flags int
	if cerr := t.rc.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0) }); cerr != nil || err != nil || flags&unix.O_NONBLOCK == 0 {
		f.Close()
		return fmt.Errorf("tap: %s: descriptor is not non-blocking (flags %#x, %v, %v)", t.name, flags, cerr, err)
	}
	t.rd = t.readFd
	t.tryRd = func(fd uintptr) { t.readFd(fd) }
	t.waitRd = func(uintptr) bool { return t.waitTry() }
	t.wr = t.writeFd
	return nil
}

// superBufs is how many super-frames one TryRead with tails may hold in its
// batch (see TAP.sbufs): one backing buffer per batch. A super-frame is
// most of a batch already (44 segments at MTU 1450), and more buffers only
// spread the reads over more cache: with four, the agents spent about 3 %
// more CPU per GB at 4 Gbit/s of TCP.
const superBufs = 1

// maxSuperFrame is the largest frame a TAP with TSO hands over: a 64 KB IP
// packet and its Ethernet header (with a VLAN tag).
const maxSuperFrame = 65535 + 14 + 4

// openWater opens the TAP through songgao/water (no offloads), persistent
// or not.
func openWater(name string, persist bool) (*os.File, string, error) {
	// water sets TUNSETPERSIST from Config.Persist: opening an existing
	// persistent TAP with Persist false would make it vanish on Close.
	ifce, err := water.New(water.Config{
		DeviceType:             water.TAP,
		PlatformSpecificParams: water.PlatformSpecificParams{Name: name, Persist: persist},
	})
	if err != nil {
		return nil, "", err
	}
	f, ok := ifce.ReadWriteCloser.(*os.File)
	if !ok {
		ifce.Close()
		return nil, "", errNotTAPFile
	}
	return f, ifce.Name(), nil
}

// openVnet opens the TAP with IFF_VNET_HDR and turns on the offloads:
// checksum, TSO4, TSO6 (with ECN), and USO4/USO6 where the kernel has them
// (Linux 6.2+). It returns the TUN_F_* flags in force. With setPersist,
// the TAP is made persistent or not (persist); without, persistence is left
// alone (further queues). multi opens one queue of a multi-queue TAP.
func openVnet(name string, persist, multi, setPersist bool) (*os.File, string, int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, "", 0, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, "", 0, err
	}
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if multi {
		flags |= unix.IFF_MULTI_QUEUE
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		if multi && errors.Is(err, unix.EINVAL) && persist {
			err = fmt.Errorf("%w (an existing single-queue TAP cannot take more queues)", err)
		}
		return nil, "", 0, fmt.Errorf("TUNSETIFF: %w", err)
	}
	if setPersist {
		if err := unix.IoctlSetInt(fd, unix.TUNSETPERSIST, boolInt(persist)); err != nil {
			unix.Close(fd)
			return nil, "", 0, fmt.Errorf("TUNSETPERSIST: %w", err)
		}
	}
	off, err := offload(fd)
	if err != nil {
		unix.Close(fd)
		return nil, "", 0, err
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun"), ifr.Name(), off, nil
}

// offload turns the TAP's offloads on (checksum, TSO, and USO where the
// kernel has it) and returns those in force.
func offload(fd int) (int, error) {
	base := unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6 | unix.TUN_F_TSO_ECN
	off := base | unix.TUN_F_USO4 | unix.TUN_F_USO6
	if unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, off) != nil {
		off = base // a kernel without USO
		if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, off); err != nil {
			return 0, fmt.Errorf("TUNSETOFFLOAD: %w", err)
		}
	}
	return off, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// setup programs MAC, MTU, addresses and link state through netlink.
func (t *TAP) setup(cfg Config) error {
	link, err := netlink.LinkByName(t.name)
	if err != nil {
		return fmt.Errorf("tap: find %s: %w", t.name, err)
	}
	if cfg.MAC != nil {
		if err := netlink.LinkSetHardwareAddr(link, cfg.MAC); err != nil {
			return fmt.Errorf("tap: set MAC %s on %s: %w", cfg.MAC, t.name, err)
		}
	}
	if cfg.alias != "" {
		if err := netlink.LinkSetAlias(link, cfg.alias); err != nil {
			return fmt.Errorf("tap: mark %s as uvxlan's: %w", t.name, err)
		}
	}
	if cfg.MTU > 0 {
		if err := netlink.LinkSetMTU(link, cfg.MTU); err != nil {
			return fmt.Errorf("tap: set MTU %d on %s: %w", cfg.MTU, t.name, err)
		}
	}
	for _, p := range cfg.Addrs {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if err := netlink.AddrReplace(link, a); err != nil {
			return fmt.Errorf("tap: add address %s to %s: %w", p, t.name, err)
		}
	}
	if t.vnet {
		// Never more segments in a super-frame than one Read returns.
		segs := t.batch
		if cfg.MaxSegments > 0 {
			segs = min(segs, cfg.MaxSegments)
		}
		if err := netlink.LinkSetGSOMaxSegs(link, segs); err != nil {
			return fmt.Errorf("tap: set gso_max_segs %d on %s: %w", segs, t.name, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("tap: set %s up: %w", t.name, err)
	}
	if link, err = netlink.LinkByName(t.name); err != nil {
		return fmt.Errorf("tap: find %s: %w", t.name, err)
	}
	t.mac = link.Attrs().HardwareAddr
	t.mtu = link.Attrs().MTU
	if st := link.Attrs().Statistics; st != nil {
		t.kdrops0 = st.TxDropped
	}
	return nil
}

// Read implements Device. It blocks in the Go netpoller until a frame is
// ready, then drains up to len(bufs) frames without blocking again.
func (t *TAP) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(bufs) > t.batch {
		bufs = bufs[:t.batch]
	}
	t.rBufs, t.rSize, t.rOff, t.rN, t.rErr, t.rTails = bufs, sizes, offset, 0, nil, nil
	t.startBatch()
	err := t.rc.Read(t.rd)
	n, rerr := t.rN, t.rErr
	t.rBufs, t.rSize = nil, nil
	if err != nil {
		return n, t.wrapErr("read", err)
	}
	return n, rerr
}

// TryRead implements Poller: Read's drain without the wait. It goes through
// the descriptor's Control, not its Read, so that it does not queue behind a
// WaitRead parked in the poller.
//
// With tails (as long as bufs), the segments of a super-frame are returned
// without copying their payloads: bufs[i] gets the headers and tails[i] the
// payload (see GSOSplitTails); tails[i] is nil for a frame read whole. The
// tails stay valid until the next TryRead or Read.
func (t *TAP) TryRead(bufs [][]byte, sizes []int, tails [][]byte, offset int) (n int, drained bool, err error) {
	if len(bufs) > t.batch {
		bufs = bufs[:t.batch]
	}
	if tails != nil && len(tails) < len(bufs) {
		return 0, false, fmt.Errorf("tap: read %s: %d tails for %d buffers", t.name, len(tails), len(bufs))
	}
	t.rBufs, t.rSize, t.rOff, t.rN, t.rErr, t.rDrained, t.rTails = bufs, sizes, offset, 0, nil, false, tails
	t.startBatch()
	cerr := t.rc.Control(t.tryRd)
	n, err, drained = t.rN, t.rErr, t.rDrained
	t.rBufs, t.rSize, t.rTails = nil, nil, nil
	if cerr != nil {
		return n, true, t.wrapErr("read", cerr)
	}
	return n, drained, err
}

// WaitRead implements Poller: try runs first, and again each time the Go
// poller reports the TAP readable, until it returns true. try runs inside
// the descriptor's Read, so that a frame that arrives while try reads is
// never missed (the poller forgets readiness seen before a Read begins);
// it may call TryRead, which does not need the Read's lock.
func (t *TAP) WaitRead(try func() bool) error {
	t.waitTry = try
	err := t.rc.Read(t.waitRd)
	t.waitTry = nil
	if err != nil {
		return t.wrapErr("read", err)
	}
	return nil
}

// startBatch starts a read's batch in sbufs[0]: the previous batch's tails
// are no longer in use, and a super-frame left pending moves to the front.
func (t *TAP) startBatch() {
	if t.sCur != 0 && t.pending > 0 {
		t.sbufs[0], t.sbufs[t.sCur] = t.sbufs[t.sCur], t.sbufs[0]
	}
	t.sCur = 0
}

// readFd is the RawConn callback of Read: it returns false (wait for
// readiness) only when nothing has been read yet.
func (t *TAP) readFd(fd uintptr) bool {
	if t.vnet {
		return t.readVnet(fd)
	}
	for t.rN < len(t.rBufs) {
		n, err := rawRead(fd, t.rBufs[t.rN][t.rOff:])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			t.rDrained = true
			return t.rN > 0
		case err != nil:
			t.rErr = fmt.Errorf("tap: read %s: %w", t.name, err)
			return true
		}
		t.rSize[t.rN] = n
		if t.rTails != nil {
			t.rTails[t.rN] = nil
		}
		t.rN++
	}
	return true
}

// readVnet reads super-frames and splits them into the caller's buffers
// until they are full or the TAP is empty. A super-frame that does not fit
// the buffers left waits in sbuf for the next Read.
func (t *TAP) readVnet(fd uintptr) bool {
	for t.rN < len(t.rBufs) {
		if t.sCur == len(t.sbufs) {
			return true // every buffer holds tails of this batch
		}
		sbuf := t.sbufs[t.sCur]
		if t.pending == 0 {
			n, err := rawRead(fd, sbuf)
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				t.rDrained = true
				return t.rN > 0
			case err != nil:
				t.rErr = fmt.Errorf("tap: read %s: %w", t.name, err)
				return true
			}
			t.pending = n
		}
		var h VirtioNetHdr
		if t.pending < VirtioNetHdrLen || h.Decode(sbuf) != nil {
			t.pending = 0
			t.drops.Add(1)
			continue
		}
		var (
			n   int
			err error
		)
		var tails [][]byte
		if t.rTails != nil {
			tails = t.rTails[t.rN:]
		}
		n, err = gsoSplit(sbuf[VirtioNetHdrLen:t.pending], h, t.rBufs[t.rN:], t.rSize[t.rN:], tails, t.rOff, t.leave)
		if errors.Is(err, ErrTooManySegments) && t.rN > 0 {
			return true // the rest next time
		}
		t.pending = 0
		if err != nil {
			t.drops.Add(1)
			continue
		}
		if t.rTails != nil && h.GSOType != GSONone {
			t.sCur++ // the tails point into sbuf: the next frame goes to the next one
		}
		t.rN += n
	}
	return true
}

// LeavePartial implements PartialReader: with offloads (Config.Offload),
// reads leave the TCP and UDP checksums the kernel asks the TAP to finish
// partial, where a receiver can tell (partial.go). Without offloads the
// kernel finishes every checksum itself, and this changes nothing.
func (t *TAP) LeavePartial() bool {
	t.leave = t.vnet
	return t.vnet
}

// OffloadDrops counts the frames read with a virtio-net header that could
// not be split (malformed, or more segments than a batch).
func (t *TAP) OffloadDrops() uint64 { return t.drops.Load() }

// PartialChecksums counts the frames written whose TCP or UDP checksum
// their sender left partial (a kernel VXLAN peer with checksum offload,
// behind a veth): completed, or handed to the kernel as needing a checksum,
// instead of written broken (partial.go).
func (t *TAP) PartialChecksums() uint64 { return t.partials.Load() }

// QueueDrops returns how many frames the kernel dropped on their way from
// the host into the TAP since it was opened: the device's tx_dropped, which
// counts mostly frames that found the queue to this process full (frames
// came faster than they were read; Linux's TAP drops them rather than make
// the sender wait). The count is the device's, shared by its queues.
func (t *TAP) QueueDrops() (uint64, error) {
	link, err := netlink.LinkByName(t.name)
	if err != nil {
		return 0, fmt.Errorf("tap: %s statistics: %w", t.name, err)
	}
	st := link.Attrs().Statistics
	if st == nil || st.TxDropped < t.kdrops0 {
		return 0, nil
	}
	return st.TxDropped - t.kdrops0, nil
}

// Offloads describes the offloads in force, for logs: "" without Offload.
func (t *TAP) Offloads() string {
	if !t.vnet {
		return ""
	}
	s := "csum,tso4,tso6"
	if t.offload&unix.TUN_F_USO4 != 0 {
		s += ",uso4,uso6"
	}
	return s
}

// Write implements Device. A TAP takes one frame per write(2).
func (t *TAP) Write(bufs [][]byte, offset int) (int, error) {
	t.wBufs, t.wOff, t.wN, t.wErr = bufs, offset, 0, nil
	t.gOut, t.gNext = nil, 0 // a Write cut short by Close leaves nothing behind
	err := t.rc.Write(t.wr)
	n, werr := t.wN, t.wErr
	t.wBufs = nil
	if err != nil {
		return n, t.wrapErr("write", err)
	}
	return n, werr
}

func (t *TAP) writeFd(fd uintptr) bool {
	if t.vnet {
		return t.writeVnet(fd)
	}
	return t.writeEach(fd, t.wBufs, t.wOff, &t.wN, false)
}

// writeEach writes frames[*next:] (each at off) with one write(2) each,
// after a zero virtio-net header when zeroHdr, advancing *next; it completes
// checksums their senders left partial (partial.go) first. It returns false
// to wait for the TAP to become writable; an error is left in wErr.
func (t *TAP) writeEach(fd uintptr, frames [][]byte, off int, next *int, zeroHdr bool) bool {
	for *next < len(frames) {
		f := frames[*next][off:]
		if start, end, co := partialCsum(f); start > 0 { // a retried write finds it complete
			_ = CompleteChecksum(f[:end], VirtioNetHdr{Flags: FlagNeedsCsum, CsumStart: uint16(start), CsumOffset: uint16(co)}) // the field is inside f[:end]
			t.partials.Add(1)
		}
		var err error
		if zeroHdr {
			_, err = rawWritev(fd, t.vnetIovecs(t.zeroHdr[:], f))
		} else {
			_, err = rawWrite(fd, f)
		}
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false
		case err != nil:
			t.wErr = fmt.Errorf("tap: write %s: %w", t.name, err)
			return true
		}
		*next++
	}
	return true
}

// vnetIovecs returns t.iovs filled with hdr and then parts, skipping empty
// parts, for one writev.
func (t *TAP) vnetIovecs(hdr []byte, parts ...[]byte) []unix.Iovec {
	iov := t.iovs[:1]
	iov[0].Base = &hdr[0]
	iov[0].SetLen(len(hdr))
	for _, p := range parts {
		if len(p) > 0 {
			iov = append(iov, unix.Iovec{Base: &p[0]})
			iov[len(iov)-1].SetLen(len(p))
		}
	}
	return iov
}

// writeVnet coalesces the frames (GRO) and writes each result with its
// virtio-net header, in one writev of the header and the result's parts: the
// merged payloads are not copied in user space. A batch larger than the GRO's
// goes out frame by frame with a zero header. wN counts the caller's frames:
// all of them once the coalesced frames are written. A write that would block
// resumes where it stopped (gOut, gNext): the coalesced frames are not
// rebuilt.
func (t *TAP) writeVnet(fd uintptr) bool {
	if len(t.wBufs) > len(t.gFrames) {
		return t.writeEach(fd, t.wBufs, t.wOff, &t.wN, true)
	}
	if t.gOut == nil {
		for i, b := range t.wBufs {
			t.gFrames[i] = b[t.wOff:]
		}
		t.gOut = t.gro.Coalesce(t.gFrames[:len(t.wBufs)])
		clear(t.gFrames)
		if n := t.gro.Partials(); n > 0 {
			t.partials.Add(uint64(n))
		}
	}
	for t.gNext < len(t.gOut) {
		o := &t.gOut[t.gNext]
		_ = o.Hdr.Encode(t.hdr[:]) // t.hdr is VirtioNetHdrLen long
		_, err := rawWritev(fd, t.vnetIovecs(t.hdr[:], o.Parts...))
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return false
		}
		if err != nil {
			t.wErr = fmt.Errorf("tap: write %s: %w", t.name, err)
			break
		}
		t.gNext++
	}
	if t.wErr == nil {
		t.wN = len(t.wBufs)
	}
	t.gOut, t.gNext = nil, 0
	return true
}

// BatchSize implements Device.
func (t *TAP) BatchSize() int { return t.batch }

// Name implements Device.
func (t *TAP) Name() string { return t.name }

// MAC implements Device.
func (t *TAP) MAC() net.HardwareAddr { return t.mac }

// MTU implements Device.
func (t *TAP) MTU() int { return t.mtu }

// Created reports whether Open created the TAP (it did not exist before).
func (t *TAP) Created() bool { return t.created }

// Owned reports whether the TAP is uvxlan's: created persistent by this
// Open or by an earlier one (Config.Persist), so Remove may delete it.
func (t *TAP) Owned() bool { return t.owned }

// Remove deletes the interface name if it is a TAP that uvxlan created
// persistent (its alias is OwnerAlias); any other interface is left alone.
// It reports whether it deleted one. Close the TAP's queues first.
func Remove(name string) (bool, error) {
	link, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return false, nil
		}
		return false, fmt.Errorf("tap: find %s: %w", name, err)
	}
	if link.Type() != "tuntap" || link.Attrs().Alias != OwnerAlias {
		return false, nil
	}
	if err := netlink.LinkDel(link); err != nil {
		return false, fmt.Errorf("tap: remove %s: %w", name, err)
	}
	return true, nil
}

// Close implements Device. A TAP that Open created without Persist
// disappears with its last file descriptor; a persistent one stays.
func (t *TAP) Close() error {
	t.closed.Store(true)
	return t.file.Close()
}

// wrapErr names the operation and turns the poller's "use of closed file"
// into os.ErrClosed, which callers can test for.
func (t *TAP) wrapErr(op string, err error) error {
	if t.closed.Load() {
		err = os.ErrClosed
	}
	return fmt.Errorf("tap: %s %s: %w", op, t.name, err)
}
