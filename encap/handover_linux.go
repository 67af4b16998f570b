package encap

// Handing a socket to another process (hot takeover): File duplicates the
// descriptor, which travels over a unix socket (SCM_RIGHTS); FileUDP makes a
// UDPConn of the received one. The socket stays bound, in its SO_REUSEPORT
// group, with whatever it has queued.

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/tap"
)

// File returns a duplicate of the socket's descriptor; the caller owns it.
func (c *UDPConn) File() (*os.File, error) {
	var nfd int
	var derr error
	if err := c.rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, fmt.Errorf("encap: dup %s: %w", c.laddr, err)
	}
	if derr != nil {
		return nil, fmt.Errorf("encap: dup %s: %w", c.laddr, derr)
	}
	return os.NewFile(uintptr(nfd), "udp:"+c.laddr.String()), nil
}

// FileUDP makes a UDPConn of a bound UDP socket another process opened
// (with ListenUDP) and passed over a unix socket. It takes ownership of f.
// opts gives the batch size and whether UDP GSO and GRO are wanted, as for
// ListenUDP; the socket's buffers and SO_REUSEPORT stay as they were.
func FileUDP(f *os.File, opts UDPOptions) (*UDPConn, error) {
	c, err := fileUDP(f, opts)
	if err != nil {
		return nil, fmt.Errorf("encap: adopt udp socket: %w", err)
	}
	return c, nil
}

func fileUDP(f *os.File, opts UDPOptions) (*UDPConn, error) {
	batch := opts.BatchSize
	if batch == 0 {
		batch = defaultBatchSize
	}
	if batch < 1 || batch > maxBatchSize {
		f.Close()
		return nil, fmt.Errorf("batch size %d out of range 1..%d", opts.BatchSize, maxBatchSize)
	}
	nf, err := tap.Pollable(f)
	if err != nil {
		return nil, err
	}
	rc, err := nf.SyscallConn()
	if err != nil {
		nf.Close()
		return nil, err
	}
	var (
		typ   int
		bound unix.Sockaddr
		serr  error
	)
	rc.Control(func(fd uintptr) {
		if typ, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE); serr == nil {
			bound, serr = unix.Getsockname(int(fd))
		}
	})
	if serr != nil {
		nf.Close()
		return nil, os.NewSyscallError("getsockopt", serr)
	}
	family := unix.AF_INET
	switch bound.(type) {
	case *unix.SockaddrInet4:
	case *unix.SockaddrInet6:
		family = unix.AF_INET6
	default:
		nf.Close()
		return nil, errors.New("not an IP socket")
	}
	if typ != unix.SOCK_DGRAM {
		nf.Close()
		return nil, errors.New("not a datagram socket")
	}
	c := &UDPConn{f: nf, rc: rc, family: family, laddr: sockaddrAddrPort(bound), batch: batch,
		r: newMmsgBatch(batch), w: newMmsgBatch(batch)}
	c.recvFn = c.recv
	c.sendFn = c.send
	rc.Control(func(fd uintptr) {
		c.gso.Store(!opts.NoGSO && unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, 0) == nil)
		if opts.GRO {
			c.gro = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1) == nil
		} else {
			unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 0)
		}
	})
	return c, nil
}
