// The chaos bench's lossy, slow underlay: netem's "loss 10% delay 50ms"
// where the kernel has no netem, by holding packets in this process. An
// iptables NFQUEUE rule hands every packet of the host's underlay
// interface (both ways) to a netfilter queue; a reader here gets each
// packet's id (not its bytes: copy mode "meta") and gives the verdict
// after the delay: drop for one in ten, accept for the rest. With
// --queue-bypass, packets pass unharmed whenever no reader is bound.
//
// The queue speaks nfnetlink (NETLINK_NETFILTER, subsystem
// NFNL_SUBSYS_QUEUE): a message is an nlmsghdr, a 4-byte nfgenmsg (family,
// version, queue number big-endian) and attributes; numbers inside the
// attributes are big-endian. The constants are from
// <linux/netfilter/nfnetlink_queue.h>.

package chaos

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/testenv"
)

const (
	nfnlSubsysQueue  = 3
	nfqnlMsgPacket   = 0
	nfqnlMsgVerdict  = 1
	nfqnlMsgConfig   = 2
	nfqaCfgCmd       = 1
	nfqaCfgParams    = 2
	nfqaCfgQueueLen  = 3
	nfqaPacketHdr    = 1
	nfqaVerdictHdr   = 2
	nfqnlCfgCmdBind  = 1
	nfqnlCfgCmdUnbnd = 2
	nfqnlCopyMeta    = 1
	nfDrop           = 0
	nfAccept         = 1
	// chaosDelay and chaosLossPercent are the lossy host's underlay.
	chaosDelay       = 50 * time.Millisecond
	chaosLossPercent = 10
)

// nfqueue is a bound netfilter queue giving delayed verdicts.
type nfqueue struct {
	fd    int
	num   uint16
	delay time.Duration
	loss  int // percent
	rng   *rand.Rand

	held    chan heldPacket
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex // guards writes to fd
	seq     uint32
	dropped int
	passed  int
}

type heldPacket struct {
	id  uint32
	due time.Time
}

// openNFQueue binds queue num in the namespace netns (its netlink socket
// belongs there) and starts giving verdicts.
func openNFQueue(netns string, num uint16, delay time.Duration, lossPercent int, seed uint64) (*nfqueue, error) {
	q := &nfqueue{fd: -1, num: num, delay: delay, loss: lossPercent, rng: rand.New(rand.NewPCG(seed, uint64(num))),
		held: make(chan heldPacket, 65536), stop: make(chan struct{})}
	err := testenv.InNetns(netns, func() error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
		if err != nil {
			return err
		}
		q.fd = fd
		return unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	})
	if err != nil {
		q.closeFD()
		return nil, fmt.Errorf("nfqueue: %w", err)
	}
	tv := unix.Timeval{Usec: 200000}
	_ = unix.SetsockoptTimeval(q.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	_ = unix.SetsockoptInt(q.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	cmd := []byte{nfqnlCfgCmdBind, 0, 0, unix.AF_INET}
	params := binary.BigEndian.AppendUint32(nil, 0xffff)
	params = append(params, nfqnlCopyMeta)
	qlen := binary.BigEndian.AppendUint32(nil, 8192)
	for _, attrs := range [][]nlAttr{{{nfqaCfgCmd, cmd}}, {{nfqaCfgParams, params}, {nfqaCfgQueueLen, qlen}}} {
		if err := q.request(nfqnlMsgConfig, attrs); err != nil {
			q.closeFD()
			return nil, fmt.Errorf("nfqueue %d: bind: %w", num, err)
		}
	}
	q.wg.Add(2)
	go q.read()
	go q.verdicts()
	return q, nil
}

type nlAttr struct {
	typ  uint16
	data []byte
}

// message builds an nfnetlink queue message of type msg with attrs.
func (q *nfqueue) message(msg uint8, flags uint16, attrs []nlAttr) []byte {
	q.seq++
	b := make([]byte, unix.NLMSG_HDRLEN, 64)
	b = append(b, unix.AF_UNSPEC, 0) // nfgenmsg: family, version
	b = binary.BigEndian.AppendUint16(b, q.num)
	for _, a := range attrs {
		b = binary.NativeEndian.AppendUint16(b, uint16(4+len(a.data)))
		b = binary.NativeEndian.AppendUint16(b, a.typ)
		b = append(b, a.data...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], nfnlSubsysQueue<<8|uint16(msg))
	binary.NativeEndian.PutUint16(b[6:], unix.NLM_F_REQUEST|flags)
	binary.NativeEndian.PutUint32(b[8:], q.seq)
	return b
}

// request sends a configuration message and waits for its ack.
func (q *nfqueue) request(msg uint8, attrs []nlAttr) error {
	if err := unix.Sendto(q.fd, q.message(msg, unix.NLM_F_ACK, attrs), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 8192)
	n, _, err := unix.Recvfrom(q.fd, buf, 0)
	if err != nil {
		return err
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
			if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
				return unix.Errno(-e)
			}
			return nil
		}
	}
	return errors.New("no ack")
}

// read takes each queued packet's id and holds it for its verdict.
func (q *nfqueue) read() {
	defer q.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		select {
		case <-q.stop:
			return
		default:
		}
		n, _, err := unix.Recvfrom(q.fd, buf, 0)
		if err != nil {
			continue // the timeout, or ENOBUFS (packets lost to a full socket are bypassed... or dropped by the kernel)
		}
		now := time.Now()
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if m.Header.Type != nfnlSubsysQueue<<8|nfqnlMsgPacket || len(m.Data) < 4 {
				continue
			}
			for a := m.Data[4:]; len(a) >= 4; {
				l, typ := int(binary.NativeEndian.Uint16(a)), binary.NativeEndian.Uint16(a[2:])&0x3fff
				if l < 4 || l > len(a) {
					break
				}
				if typ == nfqaPacketHdr && l >= 4+4 {
					q.held <- heldPacket{id: binary.BigEndian.Uint32(a[4:]), due: now.Add(q.delay)}
				}
				a = a[min(len(a), (l+3)&^3):]
			}
		}
	}
}

// verdicts gives each held packet its verdict when it is due: in order,
// since every packet is held as long.
func (q *nfqueue) verdicts() {
	defer q.wg.Done()
	for {
		var p heldPacket
		select {
		case <-q.stop:
			return
		case p = <-q.held:
		}
		if d := time.Until(p.due); d > 0 {
			time.Sleep(d)
		}
		verdict := uint32(nfAccept)
		if q.rng.IntN(100) < q.loss {
			verdict = nfDrop
			q.dropped++
		} else {
			q.passed++
		}
		hdr := binary.BigEndian.AppendUint32(nil, verdict)
		hdr = binary.BigEndian.AppendUint32(hdr, p.id)
		_ = unix.Sendto(q.fd, q.message(nfqnlMsgVerdict, 0, []nlAttr{{nfqaVerdictHdr, hdr}}), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	}
}

// close unbinds the queue (the rule's --queue-bypass then lets packets
// through) and stops.
func (q *nfqueue) close() {
	close(q.stop)
	q.wg.Wait()
	// Packets still held get their verdict from the kernel when the
	// socket closes: the queue is flushed (dropped).
	_ = unix.Sendto(q.fd, q.message(nfqnlMsgConfig, 0, []nlAttr{{nfqaCfgCmd, []byte{nfqnlCfgCmdUnbnd, 0, 0, unix.AF_INET}}}), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
	q.closeFD()
}

func (q *nfqueue) closeFD() {
	if q.fd >= 0 {
		unix.Close(q.fd)
		q.fd = -1
	}
}

// lossyUnderlay makes h's underlay lose chaosLossPercent of its packets
// and delay the rest by chaosDelay, both ways, until the returned
// function is called: iptables rules queue them to an nfqueue of this
// process. It fails when the kernel or iptables cannot queue.
func lossyUnderlay(ctx context.Context, h *testenv.Host, seed uint64) (undo func() error, err error) {
	num := strconv.Itoa(h.Index)
	q, err := openNFQueue(h.Netns, uint16(h.Index), chaosDelay, chaosLossPercent, seed)
	if err != nil {
		return nil, err
	}
	rules := [][]string{
		{"-t", "mangle", "OUTPUT", "-o", testenv.UnderlayIface, "-j", "NFQUEUE", "--queue-num", num, "--queue-bypass"},
		{"-t", "mangle", "PREROUTING", "-i", testenv.UnderlayIface, "-j", "NFQUEUE", "--queue-num", num, "--queue-bypass"},
	}
	rule := func(op string, r []string) error {
		args := append([]string{r[0], r[1], op}, r[2:]...)
		_, err := h.Run(context.WithoutCancel(ctx), "iptables", args...)
		return err
	}
	var added [][]string
	undo = func() error {
		var errs []error
		for _, r := range added {
			errs = append(errs, rule("-D", r))
		}
		q.close()
		return errors.Join(errs...)
	}
	for _, r := range rules {
		if err := rule("-A", r); err != nil {
			return nil, errors.Join(err, undo())
		}
		added = append(added, r)
	}
	return undo, nil
}
