package encap

// The UDP transport moves batches of datagrams with one system call each way.
//
// Receive (ReadBatch):
//  1. Point one iovec at each caller buffer, and one sockaddr at each slot.
//  2. recvmmsg takes whatever is queued, up to the batch; on EAGAIN the
//     goroutine parks in the Go netpoller until the socket is readable.
//  3. Copy each length and source address back into the caller's Messages.
//
// Send (WriteBatch):
//  1. Encode each destination into a preallocated sockaddr; a destination
//     of the wrong family is skipped. With UDP GSO (UDP_SEGMENT, Linux
//     4.18+), consecutive messages to the same destination with the same
//     length (the last one may be shorter) become one message with one
//     iovec each and a UDP_SEGMENT control message: the kernel sends them
//     as one super-datagram down the stack, cut into the same datagrams at
//     the end (or by the NIC). A group the kernel refuses (EINVAL, EIO,
//     EMSGSIZE: a segment above the path MTU, a device without GSO) turns
//     GSO off for the socket and goes out one datagram at a time.
//  2. sendmmsg from the head of the batch; a message the kernel refuses is
//     skipped (and marked TooBig for EMSGSIZE), and the rest are sent by
//     the next call; on EAGAIN the
//     goroutine parks until the socket is writable.
//  3. Repeat until every message was sent or skipped.
//
// The scratch for both (mmsghdrs, iovecs, sockaddrs) is allocated once per
// UDPConn, so neither path allocates per call.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	defaultBatchSize    = 64
	maxBatchSize        = 1024 // UIO_MAXIOV: the kernel caps vlen there
	defaultSocketBuffer = 4 << 20
	// maxGSOSegments and maxGSOBytes bound one UDP GSO send: the kernel's
	// UDP_MAX_SEGMENTS, and the largest UDP payload.
	maxGSOSegments = 64
	maxGSOBytes    = 65507
)

// GSOSegments is how many datagrams of a frame of up to mtu bytes (the
// TAP's MTU) with its VXLAN header one UDP GSO send carries: 44 for an MTU
// of 1450. A TCP super-frame of at most that many segments leaves as one
// super-datagram, and arrives (with UDP GRO) as one run. It is 0 for an
// mtu of 0 or less (unknown).
func GSOSegments(mtu int) int {
	if mtu <= 0 {
		return 0
	}
	return max(1, min(maxGSOBytes/(HeaderLen+ethHeaderLen+mtu), maxGSOSegments))
}

// errAddrFamily is wrapped by WriteBatch for a message whose address does
// not fit the socket (IPv6 on an IPv4 socket, or no address at all).
var errAddrFamily = errors.New("address does not fit the socket's family")

// UDPOptions tunes ListenUDP. The zero value gives the defaults.
type UDPOptions struct {
	// BatchSize is the most datagrams one ReadBatch or WriteBatch system
	// call handles, 1..1024. Zero means 64.
	BatchSize int

	// SocketBuffer is the size in bytes asked for both SO_RCVBUF and
	// SO_SNDBUF. Zero means 4 MiB. ListenUDP tries SO_RCVBUFFORCE and
	// SO_SNDBUFFORCE first, which pass the net.core.[rw]mem_max limits
	// when the process has CAP_NET_ADMIN; otherwise the kernel caps it.
	SocketBuffer int

	// NoGSO turns UDP GSO off (it is on wherever the kernel has it).
	NoGSO bool

	// GRO turns UDP GRO on (UDP_GRO, Linux 5.0+): the kernel may hand
	// over a run of datagrams of one flow as one message, with
	// Message.Seg set. Ignored where the kernel does not have it.
	GRO bool

	// ReusePort sets SO_REUSEPORT before binding, so that several sockets
	// (one per TAP queue) share the port and the kernel spreads the flows
	// over them. Every socket on the port must set it.
	ReusePort bool
}

// UDPConn is a UDP socket that sends and receives in batches with
// sendmmsg and recvmmsg. It implements Transport.
//
// One ReadBatch and one WriteBatch may run at the same time, and Close may
// be called at any time from any goroutine; two concurrent ReadBatch calls
// (or two WriteBatch calls) are not allowed, because each direction has a
// single set of scratch buffers.
type UDPConn struct {
	f      *os.File
	rc     syscall.RawConn
	family int // unix.AF_INET or unix.AF_INET6
	laddr  netip.AddrPort
	batch  int
	closed atomic.Bool

	r, w mmsgBatch
	// gso says UDP_SEGMENT works on this socket (probed at open, turned
	// off when the kernel refuses a send).
	gso atomic.Bool
	gro bool // UDP_GRO is on: received messages may carry a segment size
	// busy is the busy-poll budget (SetBusyPoll); spinUntil is the
	// current ReadBatch's deadline (0: not yet spinning).
	busy      atomic.Int64
	spinUntil int64
	// recvFn and sendFn are c.recv and c.send, bound once: passing a
	// method value to RawConn.Read would allocate on every call.
	recvFn, sendFn func(fd uintptr) bool
}

var _ Transport = (*UDPConn)(nil)

// mmsgBatch is the scratch of one direction: hdrs[i] points at iovs[i] and
// names[i] for good; each call points iovs[i] at the caller's buffer.
type mmsgBatch struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // big enough for IPv4 too
	cmsgs [][]byte                // send: the UDP_SEGMENT control message of hdrs[i]
	cnt   []int                   // send: messages (iovecs) in hdrs[i]
	first []int                   // send: index in win of hdrs[i]'s first message
	win   []Message               // send: the caller's messages of this system call loop

	n     int        // messages in hdrs for this system call loop
	head  int        // send: first message not yet sent or skipped
	done  int        // receive: messages received; send: messages sent
	errno unix.Errno // receive: the failure of recvmmsg
	err   error      // send: the first message the kernel refused
}

func newMmsgBatch(n int) mmsgBatch {
	b := mmsgBatch{
		hdrs:  make([]unix.Mmsghdr, n),
		iovs:  make([]unix.Iovec, 2*n), // send: two per message with a Tail
		names: make([]unix.RawSockaddrInet6, n),
		cmsgs: make([][]byte, n),
		cnt:   make([]int, n),
		first: make([]int, n),
	}
	for i := range b.hdrs {
		h := &b.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		h.Iov = &b.iovs[i]
		h.SetIovlen(1)
		b.cmsgs[i] = make([]byte, unix.CmsgSpace(4)) // UDP_GRO's int; UDP_SEGMENT's uint16 fits
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&b.cmsgs[i][0]))
		cm.Level, cm.Type = unix.SOL_UDP, unix.UDP_SEGMENT
		cm.SetLen(unix.CmsgLen(2))
	}
	return b
}

// release forgets the caller's buffers, so they are not kept alive.
func (b *mmsgBatch) release() {
	for i := range b.n {
		b.iovs[i].Base = nil
	}
}

// ListenUDP opens a UDP socket bound to laddr: IPv4 or IPv6 by laddr's
// family (an IPv4-mapped IPv6 address counts as IPv4). Port 0 picks a free
// port, and an unspecified address listens on all addresses; "[::]" also
// receives IPv4, whose sources are reported as plain IPv4 addresses. IPv6
// zones are not supported. SO_REUSEADDR is off, so a port in use fails
// with an error that wraps unix.EADDRINUSE.
func ListenUDP(laddr netip.AddrPort, opts UDPOptions) (*UDPConn, error) {
	c, err := listenUDP(laddr, opts)
	if err != nil {
		return nil, fmt.Errorf("encap: listen udp %s: %w", laddr, err)
	}
	return c, nil
}

func listenUDP(laddr netip.AddrPort, opts UDPOptions) (*UDPConn, error) {
	batch := opts.BatchSize
	if batch == 0 {
		batch = defaultBatchSize
	}
	if batch < 1 || batch > maxBatchSize {
		return nil, fmt.Errorf("batch size %d out of range 1..%d", opts.BatchSize, maxBatchSize)
	}
	bufSize := opts.SocketBuffer
	if bufSize == 0 {
		bufSize = defaultSocketBuffer
	}
	if bufSize < 0 {
		return nil, fmt.Errorf("negative socket buffer size %d", bufSize)
	}
	addr := laddr.Addr().Unmap()
	if !addr.IsValid() {
		return nil, errors.New("no address")
	}
	if addr.Zone() != "" {
		return nil, errors.New("IPv6 zones are not supported")
	}

	var (
		family = unix.AF_INET6
		sa     unix.Sockaddr
	)
	if addr.Is4() {
		family = unix.AF_INET
		sa = &unix.SockaddrInet4{Port: int(laddr.Port()), Addr: addr.As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(laddr.Port()), Addr: addr.As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	if err := setupSocket(fd, family, bufSize); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if opts.ReusePort {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			unix.Close(fd)
			return nil, os.NewSyscallError("setsockopt SO_REUSEPORT", err)
		}
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("getsockname", err)
	}

	// The fd is non-blocking, so os.NewFile registers it with the
	// netpoller: RawConn callbacks that return false wait there, and
	// closing the file wakes them.
	f := os.NewFile(uintptr(fd), "udp:"+laddr.String())
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	c := &UDPConn{
		f:      f,
		rc:     rc,
		family: family,
		laddr:  sockaddrAddrPort(bound),
		batch:  batch,
		r:      newMmsgBatch(batch),
		w:      newMmsgBatch(batch),
	}
	c.recvFn = c.recv
	c.sendFn = c.send
	// UDP GSO: a kernel without it refuses the option.
	c.gso.Store(!opts.NoGSO && unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_SEGMENT, 0) == nil)
	c.gro = opts.GRO && unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 1) == nil
	return c, nil
}

// GRO reports whether the kernel coalesces received datagrams (UDP_GRO).
func (c *UDPConn) GRO() bool { return c.gro }

// DisableGRO turns UDP GRO off. Call it before the first ReadBatch.
func (c *UDPConn) DisableGRO() error {
	if !c.gro {
		return nil
	}
	var serr error
	if err := c.rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 0)
	}); err != nil {
		return err
	}
	if serr != nil {
		return os.NewSyscallError("setsockopt UDP_GRO", serr)
	}
	c.gro = false
	return nil
}

// GSO reports whether sends use UDP GSO.
func (c *UDPConn) GSO() bool { return c.gso.Load() }

// setupSocket sets the socket options ListenUDP promises.
func setupSocket(fd, family, bufSize int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 0); err != nil {
		return os.NewSyscallError("setsockopt SO_REUSEADDR", err)
	}
	if family == unix.AF_INET6 {
		// Dual-stack whatever net.ipv6.bindv6only says.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return os.NewSyscallError("setsockopt IPV6_V6ONLY", err)
		}
	}
	for _, opt := range []struct {
		force, plain int
		name         string
	}{
		{unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, "SO_RCVBUF"},
		{unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, "SO_SNDBUF"},
	} {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt.force, bufSize) == nil {
			continue
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt.plain, bufSize); err != nil {
			return os.NewSyscallError("setsockopt "+opt.name, err)
		}
	}
	return nil
}

// BatchSize is the most messages one ReadBatch fills and one sendmmsg
// sends. It does not change.
func (c *UDPConn) BatchSize() int { return c.batch }

// LocalAddr is the bound address, with the port the kernel picked if
// ListenUDP was given port 0.
func (c *UDPConn) LocalAddr() netip.AddrPort { return c.laddr }

// Close closes the socket. ReadBatch and WriteBatch calls blocked in it,
// and all later calls, return net.ErrClosed; so does a second Close.
func (c *UDPConn) Close() error {
	if c.closed.Swap(true) {
		return net.ErrClosed
	}
	return c.f.Close()
}

// StopReading ends a blocked ReadBatch, and every later one, with
// os.ErrDeadlineExceeded, without closing the socket: WriteBatch still
// sends. (A deadline is this process's own: a successor that shares the
// socket reads on.)
func (c *UDPConn) StopReading() error {
	return c.f.SetReadDeadline(time.Unix(1, 0))
}

// ReadBatch blocks until at least one datagram arrives, then receives up
// to min(len(msgs), BatchSize()) of them with one recvmmsg. For each
// message i < n it sets msgs[i].N to the datagram's length and msgs[i].Addr
// to its source. The whole of msgs[i].Buf is offered to the kernel; a
// datagram longer than that is truncated to len(Buf), so Buf should hold
// the largest datagram expected. Buffers belong to the caller and are not
// retained. It does not allocate.
func (c *UDPConn) ReadBatch(msgs []Message) (int, error) {
	r := &c.r
	r.n = min(len(msgs), c.batch)
	if r.n == 0 {
		return 0, nil
	}
	for i := range r.n {
		setIovec(&r.iovs[i], msgs[i].Buf)
		h := &r.hdrs[i].Hdr
		h.Namelen = unix.SizeofSockaddrInet6
		if c.gro {
			h.Control = &r.cmsgs[i][0]
			h.SetControllen(len(r.cmsgs[i]))
		}
	}
	c.spinUntil = 0
	err := c.rc.Read(c.recvFn)
	r.release()
	if err != nil {
		return 0, c.pollError("read", err)
	}
	if r.errno != 0 {
		return 0, fmt.Errorf("encap: read %s: %w", c.laddr, os.NewSyscallError("recvmmsg", r.errno))
	}
	for i := range r.done {
		msgs[i].N = int(r.hdrs[i].Len)
		msgs[i].Addr = rawAddrPort(&r.names[i])
		msgs[i].Seg = 0
		if c.gro {
			msgs[i].Seg = groSegment(r.cmsgs[i][:r.hdrs[i].Hdr.Controllen])
		}
	}
	return r.done, nil
}

// recv is the RawConn.Read callback of ReadBatch. It returns false to wait
// for the socket to become readable.
//
// The socket is non-blocking, so recvmmsg and sendmmsg are made as raw
// system calls, which keep the Go processor (P) instead of handing it back
// for the call: see tap/rawsys_linux.go for why that matters per packet.
func (c *UDPConn) recv(fd uintptr) bool {
	r := &c.r
	for {
		n, _, errno := unix.RawSyscall6(unix.SYS_RECVMMSG, fd,
			uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(r.n), 0, 0, 0)
		switch errno {
		case 0:
			r.done, r.errno = int(n), 0
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			if c.spin() {
				continue
			}
			return false
		default:
			r.done, r.errno = 0, errno
			return true
		}
	}
}

// SetBusyPoll makes ReadBatch busy-poll: on an empty socket it retries for
// up to d (yielding the processor between tries) before it parks in the
// poller. It trades CPU for the latency of a wake-up; 0 turns it off.
func (c *UDPConn) SetBusyPoll(d time.Duration) { c.busy.Store(int64(max(d, 0))) }

// spin reports whether an empty receive should be retried: the busy-poll
// budget of this ReadBatch is not spent yet.
func (c *UDPConn) spin() bool {
	return spinWait(c.busy.Load(), &c.spinUntil)
}

// spinWait is one step of a busy-poll of budget ns: it starts the deadline
// (*until) on the first call, yields the processor, and reports whether the
// deadline is still ahead.
func spinWait(budget int64, until *int64) bool {
	if budget <= 0 {
		return false
	}
	now := time.Now().UnixNano()
	if *until == 0 {
		*until = now + budget
	}
	if now >= *until {
		return false
	}
	runtime.Gosched()
	return true
}

// WriteBatch sends msgs[i].Buf[:msgs[i].N] to msgs[i].Addr for every i,
// BatchSize() messages per sendmmsg. A message the kernel refuses
// (EMSGSIZE, EHOSTUNREACH, ENETUNREACH, EACCES, EINVAL for port 0, ...) or
// whose address does not fit the socket (IPv6 on an IPv4 socket; IPv4 on an
// IPv6 socket is sent as IPv4-mapped) is skipped and the rest are still
// sent; one refused with EMSGSIZE (too big for the path) is marked
// TooBig, and TooBig is cleared on the others. It blocks while the socket
// buffer is full. It returns how many messages were sent and the first
// error seen, or nil if all were sent; only a closed socket stops it early,
// with net.ErrClosed. Buffers belong to the caller and are not retained. It
// does not allocate, except to report an error.
func (c *UDPConn) WriteBatch(msgs []Message) (int, error) {
	w := &c.w
	w.done, w.err = 0, nil
	gso := c.gso.Load()
	for len(msgs) > 0 {
		w.n, w.head, w.win = 0, 0, msgs
		iov := 0 // next free iovec
		for len(msgs) > 0 && w.n < c.batch && iov < len(w.iovs) {
			m := &msgs[0]
			m.TooBig = false
			namelen := c.putRawAddrPort(&w.names[w.n], m.Addr)
			if namelen == 0 {
				if w.n > 0 {
					break // send the ones before it first: errors stay in order
				}
				if w.err == nil {
					w.err = fmt.Errorf("encap: write to %s from %s: %w", m.Addr, c.laddr, errAddrFamily)
				}
				msgs = msgs[1:]
				continue
			}
			// With GSO, the group: the messages after m to the same
			// destination with m's length, and one shorter one to end it.
			// Each message takes one iovec, two with a Tail.
			k, used, mlen := 1, iovecs(m), m.Len()
			if iov+used > len(w.iovs) {
				break
			}
			if gso {
				total := mlen
				for k < len(msgs) && k < maxGSOSegments && iov+used+iovecs(&msgs[k]) <= len(w.iovs) {
					next := &msgs[k]
					nlen := next.Len()
					if next.Addr != m.Addr || nlen > mlen || nlen == 0 || total+nlen > maxGSOBytes {
						break
					}
					total += nlen
					used += iovecs(next)
					next.TooBig = false
					k++
					if nlen < mlen {
						break
					}
				}
			}
			h := &w.hdrs[w.n].Hdr
			h.Namelen = namelen
			h.Iov = &w.iovs[iov]
			h.SetIovlen(used)
			at := iov
			for j := range k {
				setIovec(&w.iovs[at], msgs[j].Buf[:msgs[j].N])
				at++
				if len(msgs[j].Tail) > 0 {
					setIovec(&w.iovs[at], msgs[j].Tail)
					at++
				}
			}
			if k > 1 {
				putSegment(w.cmsgs[w.n], uint16(mlen))
				h.Control = &w.cmsgs[w.n][0]
				h.SetControllen(unix.CmsgSpace(2))
			} else {
				h.Control = nil
				h.SetControllen(0)
			}
			w.cnt[w.n] = k
			w.first[w.n] = len(w.win) - len(msgs)
			iov += used
			w.n++
			msgs = msgs[k:]
		}
		if w.n == 0 {
			continue
		}
		err := c.rc.Write(c.sendFn)
		w.releaseSend(iov)
		w.win = nil
		if err != nil {
			return w.done, c.pollError("write", err)
		}
	}
	return w.done, w.err
}

// groSegment returns the segment size of a UDP_GRO control message among
// the control messages b, or 0.
func groSegment(b []byte) int {
	for len(b) >= unix.CmsgLen(0) {
		cm := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		l := int(cm.Len)
		if l < unix.CmsgLen(0) || l > len(b) {
			return 0
		}
		if cm.Level == unix.SOL_UDP && cm.Type == unix.UDP_GRO && l >= unix.CmsgLen(4) {
			return int(*(*int32)(unsafe.Pointer(&b[unix.CmsgLen(0)])))
		}
		b = b[min(unix.CmsgSpace(l-unix.CmsgLen(0)), len(b)):]
	}
	return 0
}

// sendEach sends the iovecs of hdr, a refused GSO group of msgs, as one
// datagram each with sendmsg. It returns how many went out and the first
// error (0: none); a datagram that fails is skipped, and marked TooBig when
// the kernel says EMSGSIZE.
func sendEach(fd uintptr, hdr *unix.Msghdr, msgs []Message) (int, unix.Errno) {
	msg := unix.Msghdr{Name: hdr.Name, Namelen: hdr.Namelen}
	sent, first := 0, unix.Errno(0)
	at := 0 // the iovec of msgs[j] in hdr's
	for j := range msgs {
		msg.Iov = (*unix.Iovec)(unsafe.Add(unsafe.Pointer(hdr.Iov), uintptr(at)*unsafe.Sizeof(unix.Iovec{})))
		msg.SetIovlen(iovecs(&msgs[j]))
		at += iovecs(&msgs[j])
		for {
			_, _, errno := unix.RawSyscall(unix.SYS_SENDMSG, fd, uintptr(unsafe.Pointer(&msg)), 0)
			if errno == unix.EINTR {
				continue
			}
			if errno == 0 {
				sent++
			} else if first == 0 {
				first = errno
			}
			msgs[j].TooBig = errno == unix.EMSGSIZE
			break
		}
	}
	return sent, first
}

// iovecs is how many iovecs WriteBatch gives m: one, and one for its Tail.
func iovecs(m *Message) int {
	if len(m.Tail) > 0 {
		return 2
	}
	return 1
}

// putSegment sets the segment size of a UDP_SEGMENT control message.
func putSegment(cmsg []byte, size uint16) {
	*(*uint16)(unsafe.Pointer(&cmsg[unix.CmsgLen(0)])) = size
}

// releaseSend forgets the caller's buffers after a send.
func (b *mmsgBatch) releaseSend(iovs int) {
	for i := range iovs {
		b.iovs[i].Base = nil
	}
}

// send is the RawConn.Write callback of WriteBatch. It returns false to
// wait for the socket to become writable, true when every message in the
// batch was sent or skipped.
func (c *UDPConn) send(fd uintptr) bool {
	w := &c.w
	for w.head < w.n {
		n, _, errno := unix.RawSyscall6(unix.SYS_SENDMMSG, fd,
			uintptr(unsafe.Pointer(&w.hdrs[w.head])), uintptr(w.n-w.head), 0, 0, 0)
		switch errno {
		case 0:
			for range int(n) {
				w.done += w.cnt[w.head]
				w.head++
			}
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			// sendmmsg stops at the first failing message and reports the
			// error only when it is the first one: skip it.
			if w.cnt[w.head] > 1 && (errno == unix.EIO || errno == unix.EINVAL || errno == unix.EMSGSIZE || errno == unix.ENOPROTOOPT) {
				// The kernel or the device refuses this GSO group (a
				// segment above the path MTU, a device without GSO): GSO
				// goes off for the socket, and the group goes out one
				// datagram at a time, as it would have without GSO.
				c.gso.Store(false)
				sent, serr := sendEach(fd, &w.hdrs[w.head].Hdr, w.win[w.first[w.head]:][:w.cnt[w.head]])
				w.done += sent
				if serr == 0 {
					w.head++
					continue
				}
				errno = serr
			}
			if errno == unix.EMSGSIZE && w.cnt[w.head] == 1 {
				w.win[w.first[w.head]].TooBig = true
			}
			if w.err == nil {
				dst := rawAddrPort(&w.names[w.head])
				w.err = fmt.Errorf("encap: write to %s from %s: %w", dst, c.laddr, os.NewSyscallError("sendmmsg", errno))
			}
			w.head++
		}
	}
	return true
}

// PathMTU returns the kernel's path MTU towards dst: the MTU of its route,
// lowered by what the kernel learned from ICMP errors (IP_MTU of a socket
// connected to it), or 0 when it cannot tell. It is for the rare datagram
// the kernel refused as too big: it opens a socket, so it allocates and
// makes system calls. Safe for concurrent use.
func (c *UDPConn) PathMTU(dst netip.Addr) int {
	dst = dst.Unmap()
	family, level, opt := unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_MTU
	var sa unix.Sockaddr = &unix.SockaddrInet6{Port: 4789, Addr: dst.As16()}
	if dst.Is4() {
		family, level, opt = unix.AF_INET, unix.IPPROTO_IP, unix.IP_MTU
		sa = &unix.SockaddrInet4{Port: 4789, Addr: dst.As4()}
	} else if !dst.IsValid() {
		return 0
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return 0
	}
	defer unix.Close(fd)
	if unix.Connect(fd, sa) != nil {
		return 0
	}
	mtu, err := unix.GetsockoptInt(fd, level, opt)
	if err != nil {
		return 0
	}
	return mtu
}

// pollError turns an error of RawConn.Read or Write into net.ErrClosed
// once Close was called (os.File reports "use of closed file").
func (c *UDPConn) pollError(op string, err error) error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	return fmt.Errorf("encap: %s %s: %w", op, c.laddr, err)
}

func setIovec(iov *unix.Iovec, b []byte) {
	iov.Base = nil
	if len(b) > 0 {
		iov.Base = &b[0]
	}
	iov.SetLen(len(b))
}

// putRawAddrPort writes ap into sa in the socket's family and returns the
// length of the sockaddr, or 0 if ap does not fit the socket.
func (c *UDPConn) putRawAddrPort(sa *unix.RawSockaddrInet6, ap netip.AddrPort) uint32 {
	addr := ap.Addr()
	switch {
	case c.family == unix.AF_INET && addr.Unmap().Is4():
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: addr.Unmap().As4()}
		putPort(&sa4.Port, ap.Port())
		return unix.SizeofSockaddrInet4
	case c.family == unix.AF_INET6 && addr.IsValid():
		*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6, Addr: addr.As16()}
		putPort(&sa.Port, ap.Port())
		return unix.SizeofSockaddrInet6
	}
	return 0
}

// rawAddrPort decodes a sockaddr filled by the kernel, unmapping
// IPv4-mapped IPv6 addresses. It does not allocate.
func rawAddrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), getPort(&sa4.Port))
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), getPort(&sa.Port))
	}
	return netip.AddrPort{}
}

// sockaddrAddrPort converts the result of Getsockname.
func sockaddrAddrPort(sa unix.Sockaddr) netip.AddrPort {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
	}
	return netip.AddrPort{}
}

// putPort and getPort access a sockaddr port, which is in network byte
// order whatever the host's.
func putPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

func getPort(p *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}
