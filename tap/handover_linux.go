package tap

// Handing a TAP to another process (hot takeover): File duplicates a
// queue's descriptor, which travels over a unix socket (SCM_RIGHTS); Adopt
// rebuilds the queues from the received descriptors. The device, its
// addresses, routes and bridge membership are untouched, and frames queued
// in the kernel stay queued for the new reader.

import (
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// File returns a duplicate of the queue's descriptor. The caller owns it;
// the device stays attached as long as either descriptor is open.
func (t *TAP) File() (*os.File, error) {
	var nfd int
	var derr error
	if err := t.rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("tap: dup %s: %w", t.name, err)
	}
	if derr != nil {
		return nil, fmt.Errorf("tap: dup %s: %w", t.name, derr)
	}
	return os.NewFile(uintptr(nfd), "/dev/net/tun:"+t.name), nil
}

// Adopt builds the queues of a TAP from descriptors another process opened
// (and passed over a unix socket), as OpenQueues would have: with offloads
// when the descriptors have a virtio-net header. It takes ownership of the
// files. cfg gives BatchSize and MaxSegments; the device's name, MAC and MTU
// are read from it, and nothing is reconfigured.
func Adopt(files []*os.File, cfg Config) ([]*TAP, error) {
	closeAll := func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("tap: adopt: no descriptor")
	}
	var (
		name  string
		flags uint16
	)
	for i, f := range files {
		nf, err := Pollable(f)
		if err != nil {
			files[i] = nil
			closeAll()
			return nil, fmt.Errorf("tap: adopt descriptor %d: %w", i, err)
		}
		files[i], f = nf, nf
		ifr, err := unix.NewIfreq("")
		if err != nil {
			closeAll()
			return nil, err
		}
		var ierr error
		raw, err := f.SyscallConn()
		if err == nil {
			err = raw.Control(func(fd uintptr) { ierr = unix.IoctlIfreq(int(fd), unix.TUNGETIFF, ifr) })
		}
		if err == nil {
			err = ierr
		}
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("tap: adopt descriptor %d: %w", i, err)
		}
		if i == 0 {
			name, flags = ifr.Name(), ifr.Uint16()
		} else if ifr.Name() != name {
			closeAll()
			return nil, fmt.Errorf("tap: adopt: descriptors of %s and %s", name, ifr.Name())
		}
	}
	if flags&unix.IFF_TAP == 0 {
		closeAll()
		return nil, fmt.Errorf("tap: adopt: %s is not a TAP", name)
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("tap: adopt: find %s: %w", name, err)
	}
	vnet := flags&unix.IFF_VNET_HDR != 0
	batch := cfg.BatchSize
	if batch <= 0 {
		batch = defaultBatches
		if vnet {
			batch = 2 * defaultBatches
		}
	}
	var qs []*TAP
	for _, f := range files {
		q := &TAP{name: name, mac: link.Attrs().HardwareAddr, mtu: link.Attrs().MTU, batch: batch, vnet: vnet,
			owned: link.Attrs().Alias == OwnerAlias}
		if vnet {
			// The offloads belong to the device; asking again tells us
			// which of them this kernel has.
			q.offload, err = setOffloads(f)
			if err != nil {
				closeAll()
				return nil, fmt.Errorf("tap: adopt %s: %w", name, err)
			}
		}
		if err := q.init(f); err != nil {
			closeAll()
			return nil, err
		}
		qs = append(qs, q)
	}
	return qs, nil
}

// setOffloads turns on the offloads openVnet does and returns those in
// force.
func setOffloads(f *os.File) (int, error) {
	raw, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var off int
	var serr error
	if err := raw.Control(func(fd uintptr) { off, serr = offload(int(fd)) }); err != nil {
		return 0, err
	}
	return off, serr
}

// Pollable returns a non-blocking duplicate of f's descriptor, as a file the
// netpoller watches, and closes f. (A file made of a blocking descriptor is
// never registered with the netpoller, and changing the mode afterwards
// does not register it.) It serves any descriptor received in a handover:
// TAP queues here, UDP sockets in package encap.
func Pollable(f *os.File) (*os.File, error) {
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	nfd, derr := -1, error(nil)
	if err := raw.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		derr = err
	}
	name := f.Name()
	f.Close()
	if derr != nil {
		return nil, fmt.Errorf("dup: %w", derr)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return nil, fmt.Errorf("set non-blocking: %w", err)
	}
	return os.NewFile(uintptr(nfd), name), nil
}
