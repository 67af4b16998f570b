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
	// removed on Close.
	Name string
	// MAC to set; nil keeps the kernel's random address.
	MAC net.HardwareAddr
	// MTU to set; 0 keeps the current one.
	MTU int
	// Addrs are added to the interface (an address already present is fine).
	Addrs []netip.Prefix
	// BatchSize is the most frames one Read returns; default 64.
	BatchSize int
}

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
	file   *os.File
	rc     syscall.RawConn
	closed atomic.Bool
	name   string
	mac    net.HardwareAddr
	mtu    int
	batch  int

	// Scratch for the RawConn callbacks, built once so that Read and Write
	// do not allocate a closure per call.
	rd    func(fd uintptr) bool
	rBufs [][]byte
	rSize []int
	rOff  int
	rN    int
	rErr  error

	wr    func(fd uintptr) bool
	wBufs [][]byte
	wOff  int
	wN    int
	wErr  error
}

var _ Device = (*TAP)(nil)

// Open creates (or attaches to) the TAP named cfg.Name, sets its MAC, MTU and
// addresses, and brings it up.
func Open(cfg Config) (*TAP, error) {
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
	ifce, err := water.New(water.Config{
		DeviceType:             water.TAP,
		PlatformSpecificParams: water.PlatformSpecificParams{Name: cfg.Name, Persist: existed},
	})
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("tap: open %s: %w", cfg.Name, ErrNoNetAdmin)
		}
		return nil, fmt.Errorf("tap: open %s: %w", cfg.Name, err)
	}
	f, ok := ifce.ReadWriteCloser.(*os.File)
	if !ok {
		ifce.Close()
		return nil, errNotTAPFile
	}
	t := &TAP{file: f, name: ifce.Name(), batch: cfg.BatchSize}
	if t.batch <= 0 {
		t.batch = defaultBatches
	}
	if err := t.setup(cfg); err != nil {
		f.Close()
		return nil, err
	}
	if t.rc, err = f.SyscallConn(); err != nil {
		f.Close()
		return nil, fmt.Errorf("tap: %s: %w", t.name, err)
	}
	t.rd = t.readFd
	t.wr = t.writeFd
	return t, nil
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
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("tap: set %s up: %w", t.name, err)
	}
	if link, err = netlink.LinkByName(t.name); err != nil {
		return fmt.Errorf("tap: find %s: %w", t.name, err)
	}
	t.mac = link.Attrs().HardwareAddr
	t.mtu = link.Attrs().MTU
	return nil
}

// Read implements Device. It blocks in the Go netpoller until a frame is
// ready, then drains up to len(bufs) frames without blocking again.
func (t *TAP) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(bufs) > t.batch {
		bufs = bufs[:t.batch]
	}
	t.rBufs, t.rSize, t.rOff, t.rN, t.rErr = bufs, sizes, offset, 0, nil
	err := t.rc.Read(t.rd)
	n, rerr := t.rN, t.rErr
	t.rBufs, t.rSize = nil, nil
	if err != nil {
		return n, t.wrapErr("read", err)
	}
	return n, rerr
}

// readFd is the RawConn callback of Read: it returns false (wait for
// readiness) only when nothing has been read yet.
func (t *TAP) readFd(fd uintptr) bool {
	for t.rN < len(t.rBufs) {
		n, err := unix.Read(int(fd), t.rBufs[t.rN][t.rOff:])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return t.rN > 0
		case err != nil:
			t.rErr = fmt.Errorf("tap: read %s: %w", t.name, err)
			return true
		}
		t.rSize[t.rN] = n
		t.rN++
	}
	return true
}

// Write implements Device. A TAP takes one frame per write(2).
func (t *TAP) Write(bufs [][]byte, offset int) (int, error) {
	t.wBufs, t.wOff, t.wN, t.wErr = bufs, offset, 0, nil
	err := t.rc.Write(t.wr)
	n, werr := t.wN, t.wErr
	t.wBufs = nil
	if err != nil {
		return n, t.wrapErr("write", err)
	}
	return n, werr
}

func (t *TAP) writeFd(fd uintptr) bool {
	for t.wN < len(t.wBufs) {
		_, err := unix.Write(int(fd), t.wBufs[t.wN][t.wOff:])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false
		case err != nil:
			t.wErr = fmt.Errorf("tap: write %s: %w", t.name, err)
			return true
		}
		t.wN++
	}
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

// Close implements Device. A TAP that Open created disappears with its last
// file descriptor.
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
