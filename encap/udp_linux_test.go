package encap_test

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/encap"
)

// All traffic in these tests goes to 127.0.0.0/8 or ::1, except
// TestUDPWriteBatchUnroutable, which runs in a network namespace it creates.

// watchdogTimeout bounds every read loop: a lost datagram fails the test
// instead of hanging it.
const watchdogTimeout = 10 * time.Second

func listen(tb testing.TB, addr string, opts encap.UDPOptions) *encap.UDPConn {
	tb.Helper()
	c, err := encap.ListenUDP(netip.MustParseAddrPort(addr), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// listenOrSkip is listen for IPv6 addresses, skipping the test when the
// host has no IPv6.
func listenOrSkip(t *testing.T, addr string) *encap.UDPConn {
	t.Helper()
	c, err := encap.ListenUDP(netip.MustParseAddrPort(addr), encap.UDPOptions{})
	if err != nil {
		t.Skipf("no IPv6 here: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// watchdog closes c after watchdogTimeout, which makes a blocked ReadBatch
// return net.ErrClosed.
func watchdog(tb testing.TB, c *encap.UDPConn) {
	timer := time.AfterFunc(watchdogTimeout, func() { c.Close() })
	tb.Cleanup(func() { timer.Stop() })
}

// readAll calls ReadBatch until every message in msgs is filled. It does
// not allocate unless it fails.
func readAll(tb testing.TB, c *encap.UDPConn, msgs []encap.Message) {
	for got := 0; got < len(msgs); {
		n, err := c.ReadBatch(msgs[got:])
		if err != nil {
			tb.Fatalf("ReadBatch after %d of %d datagrams (watchdog: %v): %v", got, len(msgs), watchdogTimeout, err)
		}
		if n < 1 || n > c.BatchSize() || n > len(msgs)-got {
			tb.Fatalf("ReadBatch returned %d for %d messages, batch size %d", n, len(msgs)-got, c.BatchSize())
		}
		got += n
	}
}

// message returns a Message carrying payload to dst.
func message(payload string, dst netip.AddrPort) encap.Message {
	return encap.Message{Buf: []byte(payload), N: len(payload), Addr: dst}
}

// buffers returns n Messages with buffers of size bytes, ready to read into.
func buffers(n, size int) []encap.Message {
	msgs := make([]encap.Message, n)
	for i := range msgs {
		msgs[i].Buf = make([]byte, size)
	}
	return msgs
}

// payloads returns the datagrams of msgs, sorted: loopback keeps them in
// order in practice, but the tests do not depend on it.
func payloads(msgs []encap.Message) []string {
	var s []string
	for _, m := range msgs {
		s = append(s, string(m.Buf[:m.N]))
	}
	slices.Sort(s)
	return s
}

func TestUDPRoundTrip(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			var tx, rx *encap.UDPConn
			if addr == "[::1]:0" {
				tx, rx = listenOrSkip(t, addr), listenOrSkip(t, addr)
			} else {
				tx, rx = listen(t, addr, encap.UDPOptions{}), listen(t, addr, encap.UDPOptions{})
			}
			watchdog(t, rx)

			// 100 datagrams (more than one batch of 64) of 0 to 9000 bytes.
			const count, maxSize = 100, 9000
			out := make([]encap.Message, count)
			for i := range out {
				b := make([]byte, i*97%(maxSize+1))
				for j := range b {
					b[j] = byte(i + j)
				}
				out[i] = encap.Message{Buf: b, N: len(b), Addr: rx.LocalAddr()}
			}
			sent, err := tx.WriteBatch(out)
			if sent != count || err != nil {
				t.Fatalf("WriteBatch: got (%d, %v), want (%d, nil)", sent, err, count)
			}

			in := buffers(count, maxSize+1)
			readAll(t, rx, in)
			for i, m := range in {
				if m.Addr != tx.LocalAddr() {
					t.Errorf("datagram %d: source %v, want %v", i, m.Addr, tx.LocalAddr())
				}
			}
			if got, want := payloads(in), payloads(out); !slices.Equal(got, want) {
				t.Errorf("the datagrams read differ from those sent")
			}
		})
	}
}

func TestUDPDualStack(t *testing.T) {
	any6 := listenOrSkip(t, "[::]:0")
	v4 := listen(t, "127.0.0.1:0", encap.UDPOptions{})
	watchdog(t, any6)
	watchdog(t, v4)
	to6 := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), any6.LocalAddr().Port())

	// IPv4 into the dual-stack socket: the source comes out as plain IPv4.
	if sent, err := v4.WriteBatch([]encap.Message{message("ping", to6)}); sent != 1 || err != nil {
		t.Fatalf("WriteBatch from IPv4: got (%d, %v), want (1, nil)", sent, err)
	}
	in := buffers(1, 100)
	readAll(t, any6, in)
	if in[0].Addr != v4.LocalAddr() {
		t.Errorf("source: got %v, want %v (unmapped)", in[0].Addr, v4.LocalAddr())
	}

	// And back: an IPv4 destination on an IPv6 socket goes out v4-mapped.
	if sent, err := any6.WriteBatch([]encap.Message{message("pong", in[0].Addr)}); sent != 1 || err != nil {
		t.Fatalf("WriteBatch from [::]: got (%d, %v), want (1, nil)", sent, err)
	}
	readAll(t, v4, in)
	if got := string(in[0].Buf[:in[0].N]); got != "pong" || in[0].Addr != to6 {
		t.Errorf("got %q from %v, want %q from %v", got, in[0].Addr, "pong", to6)
	}
}

func TestUDPAddrInUse(t *testing.T) {
	c := listen(t, "127.0.0.1:0", encap.UDPOptions{})
	c2, err := encap.ListenUDP(c.LocalAddr(), encap.UDPOptions{})
	if err == nil {
		c2.Close()
		t.Fatalf("ListenUDP(%v) twice: no error", c.LocalAddr())
	}
	if !errors.Is(err, unix.EADDRINUSE) {
		t.Errorf("ListenUDP(%v) twice: got %v, want an error wrapping EADDRINUSE", c.LocalAddr(), err)
	}
}

func TestUDPListenErrors(t *testing.T) {
	for _, tt := range []struct {
		desc string
		addr netip.AddrPort
		opts encap.UDPOptions
	}{
		{"no address", netip.AddrPort{}, encap.UDPOptions{}},
		{"batch too big", netip.MustParseAddrPort("127.0.0.1:0"), encap.UDPOptions{BatchSize: 1025}},
		{"negative batch", netip.MustParseAddrPort("127.0.0.1:0"), encap.UDPOptions{BatchSize: -1}},
		{"negative buffer", netip.MustParseAddrPort("127.0.0.1:0"), encap.UDPOptions{SocketBuffer: -1}},
	} {
		if c, err := encap.ListenUDP(tt.addr, tt.opts); err == nil {
			c.Close()
			t.Errorf("%s: ListenUDP(%v, %+v): no error", tt.desc, tt.addr, tt.opts)
		}
	}
}

func TestUDPCloseUnblocksRead(t *testing.T) {
	c, err := encap.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), encap.UDPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.ReadBatch(buffers(4, 100))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let ReadBatch block
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("blocked ReadBatch: got %v, want net.ErrClosed", err)
		}
	case <-time.After(time.Second):
		t.Fatal("ReadBatch still blocked 1s after Close")
	}

	if _, err := c.ReadBatch(buffers(1, 100)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadBatch after Close: got %v, want net.ErrClosed", err)
	}
	if _, err := c.WriteBatch([]encap.Message{message("x", c.LocalAddr())}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("WriteBatch after Close: got %v, want net.ErrClosed", err)
	}
	if err := c.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: got %v, want net.ErrClosed", err)
	}
}

// TestUDPWriteBatchSkipsRefused sends batches in which the kernel refuses
// some messages, at every position relative to the batch boundaries.
func TestUDPWriteBatchSkipsRefused(t *testing.T) {
	for _, batch := range []int{1, 2, 3, 64} {
		t.Run(fmt.Sprintf("batch=%d", batch), func(t *testing.T) {
			tx := listen(t, "127.0.0.1:0", encap.UDPOptions{BatchSize: batch})
			rx := listen(t, "127.0.0.1:0", encap.UDPOptions{})
			watchdog(t, rx)
			dst := rx.LocalAddr()
			tooBig := make([]byte, 65508) // the largest IPv4 UDP payload is 65507
			msgs := []encap.Message{
				message("first", dst),
				{Buf: tooBig, N: len(tooBig), Addr: dst}, // EMSGSIZE
				message("second", dst),
				message("to port 0", netip.MustParseAddrPort("127.0.0.1:0")), // EINVAL
				message("third", dst),
				message("IPv6 on an IPv4 socket", netip.MustParseAddrPort("[::1]:4789")),
				message("no address", netip.AddrPort{}),
				message("fourth", dst),
			}
			sent, err := tx.WriteBatch(msgs)
			if sent != 4 {
				t.Errorf("WriteBatch: sent %d, want 4", sent)
			}
			if !errors.Is(err, unix.EMSGSIZE) {
				t.Errorf("WriteBatch: got error %v, want the first one, EMSGSIZE", err)
			}
			for i, m := range msgs {
				if m.TooBig != (i == 1) {
					t.Errorf("message %d: TooBig %v, want %v (only the one refused with EMSGSIZE)", i, m.TooBig, i == 1)
				}
			}
			in := buffers(4, 100)
			readAll(t, rx, in)
			if got, want := payloads(in), []string{"first", "fourth", "second", "third"}; !slices.Equal(got, want) {
				t.Errorf("received %q, want %q", got, want)
			}
		})
	}
}

func TestUDPPathMTU(t *testing.T) {
	c := listen(t, "127.0.0.1:0", encap.UDPOptions{})
	if got := c.PathMTU(netip.MustParseAddr("127.0.0.1")); got < 1500 {
		t.Errorf("PathMTU(127.0.0.1) = %d, want lo's (65535 or so)", got)
	}
	if got := c.PathMTU(netip.Addr{}); got != 0 {
		t.Errorf("PathMTU(invalid) = %d, want 0", got)
	}
}

// TestUDPWriteBatchUnroutable checks that unreachable destinations do not
// stop a batch. It needs routes that fail, so it runs in a throwaway network
// namespace that has only lo and such routes; nothing leaves it.
func TestUDPWriteBatchUnroutable(t *testing.T) {
	ns := newNetns(t)
	for _, args := range [][]string{
		{"link", "set", "lo", "up"},
		{"route", "add", "unreachable", "198.18.0.0/24"},
		{"route", "add", "prohibit", "198.18.1.0/24"},
		// 198.19.0.0/16 has no route at all.
	} {
		ipCmd(t, append([]string{"-n", ns}, args...)...)
	}
	tx, rx := loopbackPair(t, ns)

	dst := rx.LocalAddr()
	msgs := []encap.Message{
		message("first", dst),
		message("x", netip.MustParseAddrPort("198.18.0.1:4789")), // EHOSTUNREACH
		message("second", dst),
		message("x", netip.MustParseAddrPort("198.18.1.1:4789")), // EACCES
		message("third", dst),
		message("x", netip.MustParseAddrPort("198.19.0.1:4789")), // ENETUNREACH
		message("fourth", dst),
	}
	sent, err := tx.WriteBatch(msgs)
	if sent != 4 {
		t.Errorf("WriteBatch: sent %d, want 4", sent)
	}
	if !errors.Is(err, unix.EHOSTUNREACH) {
		t.Errorf("WriteBatch: got error %v, want the first one, EHOSTUNREACH", err)
	}
	in := buffers(4, 100)
	readAll(t, rx, in)
	if got, want := payloads(in), []string{"first", "fourth", "second", "third"}; !slices.Equal(got, want) {
		t.Errorf("received %q, want %q", got, want)
	}
}

// loopbackPair opens two sockets on 127.0.0.1 inside namespace ns, closed
// when the test ends; rx has a watchdog.
func loopbackPair(t *testing.T, ns string) (tx, rx *encap.UDPConn) {
	t.Helper()
	t.Cleanup(func() {
		for _, c := range []*encap.UDPConn{tx, rx} {
			if c != nil {
				c.Close()
			}
		}
	})
	inNetns(t, ns, func() (err error) {
		if tx, err = encap.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), encap.UDPOptions{}); err != nil {
			return err
		}
		rx, err = encap.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), encap.UDPOptions{})
		return err
	})
	watchdog(t, rx)
	return tx, rx
}

// newNetns creates a network namespace deleted when the test ends. It skips
// the test under -short (make unit), without root or without iproute2,
// unless UVXLAN_REQUIRE_NETNS=1.
func newNetns(t *testing.T) string {
	t.Helper()
	skip := t.Skipf
	if os.Getenv("UVXLAN_REQUIRE_NETNS") == "1" {
		skip = t.Fatalf
	}
	if testing.Short() {
		skip("-short: namespace tests do not run")
	}
	if os.Geteuid() != 0 {
		skip("needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		skip("needs iproute2: %v", err)
	}
	name := fmt.Sprintf("uvx-encap-%d", os.Getpid())
	ipCmd(t, "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return name
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

// inNetns runs fn on an OS thread moved into network namespace ns, so the
// sockets fn creates live there.
func inNetns(t *testing.T, ns string, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		// The thread stays locked, and is thrown away when this goroutine
		// ends, unless it is back in its own namespace.
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open("/run/netns/" + ns)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		fnErr := fn()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(fnErr, fmt.Errorf("setns back: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestUDPAllocs(t *testing.T) {
	tx := listen(t, "127.0.0.1:0", encap.UDPOptions{})
	rx := listen(t, "127.0.0.1:0", encap.UDPOptions{})
	watchdog(t, rx)
	const batch = 16
	out := make([]encap.Message, batch)
	for i := range out {
		out[i] = encap.Message{Buf: make([]byte, 100), N: 100, Addr: rx.LocalAddr()}
	}
	in := buffers(batch, 1500)
	allocs := testing.AllocsPerRun(100, func() {
		if sent, err := tx.WriteBatch(out); sent != batch || err != nil {
			t.Fatalf("WriteBatch: got (%d, %v), want (%d, nil)", sent, err, batch)
		}
		readAll(t, rx, in)
	})
	if allocs != 0 {
		t.Errorf("WriteBatch+ReadBatch of %d datagrams: %v allocs per run, want 0", batch, allocs)
	}

	// With busy-polling on, ReadBatch still gets every datagram and
	// allocates nothing.
	rx.SetBusyPoll(200 * time.Microsecond)
	allocs = testing.AllocsPerRun(100, func() {
		if sent, err := tx.WriteBatch(out); sent != batch || err != nil {
			t.Fatalf("WriteBatch: got (%d, %v), want (%d, nil)", sent, err, batch)
		}
		readAll(t, rx, in)
	})
	if allocs != 0 {
		t.Errorf("busy-polling: %v allocs per run, want 0", allocs)
	}
}

// BenchmarkUDPLoopback measures one WriteBatch and the ReadBatch calls that
// receive it, over loopback, per operation.
func BenchmarkUDPLoopback(b *testing.B) {
	const size = 1400 // a VXLAN datagram carrying a typical frame
	for _, batch := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			opts := encap.UDPOptions{BatchSize: batch}
			tx, rx := listen(b, "127.0.0.1:0", opts), listen(b, "127.0.0.1:0", opts)
			watchdog(b, rx)
			out := make([]encap.Message, batch)
			for i := range out {
				out[i] = encap.Message{Buf: make([]byte, size), N: size, Addr: rx.LocalAddr()}
			}
			in := buffers(batch, 2048)
			b.ReportAllocs()
			b.SetBytes(int64(batch * size))
			for b.Loop() {
				if _, err := tx.WriteBatch(out); err != nil {
					b.Fatal(err)
				}
				readAll(b, rx, in)
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "pkts/s")
		})
	}
}

// Runs of equal-sized datagrams to one destination go out as UDP GSO
// super-datagrams; the receiver still gets every datagram as it was sent,
// also across groups, batches, destinations and a shorter last datagram.
// With tails, the datagrams are sent in two parts (headers in Buf, payload
// in Tail, gathered by the kernel), some of them whole, and arrive alike.
func TestUDPWriteBatchGSO(t *testing.T) {
	for _, tc := range []struct{ noGSO, tails bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprintf("NoGSO=%v/tails=%v", tc.noGSO, tc.tails), func(t *testing.T) {
			tx := listen(t, "127.0.0.1:0", encap.UDPOptions{NoGSO: tc.noGSO})
			rx1 := listen(t, "127.0.0.1:0", encap.UDPOptions{})
			rx2 := listen(t, "127.0.0.2:0", encap.UDPOptions{})
			watchdog(t, rx1)
			watchdog(t, rx2)
			if tx.GSO() == tc.noGSO {
				t.Logf("GSO() = %v with NoGSO %v (a kernel without UDP_SEGMENT?)", tx.GSO(), tc.noGSO)
			}
			var out, to1, to2 []encap.Message
			add := func(dst *encap.UDPConn, n, size int) {
				for range n {
					b := make([]byte, size)
					for j := range b {
						b[j] = byte(len(out) + j)
					}
					m := encap.Message{Buf: b, N: size, Addr: dst.LocalAddr()}
					if dst == rx1 {
						to1 = append(to1, m)
					} else {
						to2 = append(to2, m)
					}
					if tc.tails && size > 60 && len(out)%5 != 0 {
						m.N, m.Tail = 58, b[58:]
					}
					out = append(out, m)
				}
			}
			add(rx1, 150, 1000) // more than a group (64) and a batch
			add(rx1, 1, 300)    // a shorter one ends the group
			add(rx2, 70, 1400)  // another destination
			add(rx1, 3, 1400)   // larger than the group before: a new group
			add(rx2, 1, 20)
			sent, err := tx.WriteBatch(out)
			if sent != len(out) || err != nil {
				t.Fatalf("WriteBatch: got (%d, %v), want (%d, nil)", sent, err, len(out))
			}
			in1, in2 := buffers(len(to1), 2000), buffers(len(to2), 2000)
			readAll(t, rx1, in1)
			readAll(t, rx2, in2)
			if !slices.Equal(payloads(in1), payloads(to1)) || !slices.Equal(payloads(in2), payloads(to2)) {
				t.Errorf("the datagrams read differ from those sent")
			}
		})
	}
}

// With GRO, a GSO send arrives as one message (or a few) with the segment
// size set; cut at Seg, it holds every datagram as sent.
func TestUDPReadBatchGRO(t *testing.T) {
	tx := listen(t, "127.0.0.1:0", encap.UDPOptions{})
	rx := listen(t, "127.0.0.1:0", encap.UDPOptions{GRO: true})
	watchdog(t, rx)
	if !tx.GSO() || !rx.GRO() {
		t.Skipf("kernel without UDP GSO (%v) or GRO (%v)", tx.GSO(), rx.GRO())
	}
	const count, size = 20, 1000
	var out []encap.Message
	for i := range count {
		b := make([]byte, size)
		b[0] = byte(i)
		out = append(out, encap.Message{Buf: b, N: size, Addr: rx.LocalAddr()})
	}
	if sent, err := tx.WriteBatch(out); sent != count || err != nil {
		t.Fatalf("WriteBatch: %d, %v", sent, err)
	}
	off := listen(t, "127.0.0.1:0", encap.UDPOptions{GRO: true})
	if err := off.DisableGRO(); err != nil || off.GRO() {
		t.Errorf("DisableGRO: %v, GRO() = %v", err, off.GRO())
	}
	in := buffers(4, 65536)
	var got []byte
	coalesced := false
	for len(got) < count {
		n, err := rx.ReadBatch(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range in[:n] {
			seg := m.N
			if m.Seg > 0 {
				seg = m.Seg
				coalesced = coalesced || m.N > m.Seg
			}
			for off := 0; off < m.N; off += seg {
				if min(seg, m.N-off) != size {
					t.Fatalf("a datagram of %d bytes", min(seg, m.N-off))
				}
				got = append(got, m.Buf[off])
			}
		}
	}
	for i, g := range got {
		if g != byte(i) {
			t.Fatalf("datagram %d is %d", i, g)
		}
	}
	if !coalesced {
		t.Error("no message carried more than one datagram")
	}
}

// A GSO group the kernel refuses (segments above the path MTU: EINVAL)
// still goes out, one datagram at a time (fragmented, as without GSO), and
// GSO is off for the socket from then on.
func TestUDPWriteBatchGSORefused(t *testing.T) {
	ns := newNetns(t)
	ipCmd(t, "-n", ns, "link", "set", "lo", "mtu", "1500", "up")
	tx, rx := loopbackPair(t, ns)
	if !tx.GSO() {
		t.Skip("no UDP GSO on this kernel")
	}
	var out []encap.Message
	for i := range 5 {
		b := make([]byte, 2000) // above lo's MTU: refused as a GSO segment
		b[0] = byte(i)
		out = append(out, encap.Message{Buf: b, N: len(b), Addr: rx.LocalAddr()})
	}
	if sent, err := tx.WriteBatch(out); sent != len(out) || err != nil {
		t.Fatalf("WriteBatch: (%d, %v), want (%d, nil)", sent, err, len(out))
	}
	if tx.GSO() {
		t.Error("GSO still on after the kernel refused a group")
	}
	in := buffers(len(out), 4000)
	readAll(t, rx, in)
	if !slices.Equal(payloads(in), payloads(out)) {
		t.Error("the datagrams read differ from those sent")
	}
}

func TestGSOSegments(t *testing.T) {
	for _, c := range []struct{ mtu, want int }{
		{1450, 44}, // 44 × 1472 = 64768 ≤ 65507 < 45 × 1472
		{1500, 43},
		{9000, 7},
		{68, 64}, // capped at UDP_MAX_SEGMENTS
		{65000, 1},
		{0, 0},
	} {
		if got := encap.GSOSegments(c.mtu); got != c.want {
			t.Errorf("GSOSegments(%d) = %d, want %d", c.mtu, got, c.want)
		}
	}
}

// StopReading ends a ReadBatch blocked on an empty socket, with
// os.ErrDeadlineExceeded, and leaves the socket open: it still sends, and
// another descriptor of it (a successor's, at a takeover) still reads.
func TestUDPStopReading(t *testing.T) {
	rx := listen(t, "127.0.0.1:0", encap.UDPOptions{})
	watchdog(t, rx)
	f, err := rx.File()
	if err != nil {
		t.Fatal(err)
	}
	other, err := encap.FileUDP(f, encap.UDPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	watchdog(t, other)
	read := make(chan error, 1)
	go func() {
		_, err := rx.ReadBatch(buffers(1, 100))
		read <- err
	}()
	time.Sleep(50 * time.Millisecond) // ReadBatch waits (no harm if not yet: it fails at once)
	if err := rx.StopReading(); err != nil {
		t.Fatal(err)
	}
	if err := <-read; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("ReadBatch after StopReading: %v, want os.ErrDeadlineExceeded", err)
	}
	if _, err := rx.ReadBatch(buffers(1, 100)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("a later ReadBatch: %v, want os.ErrDeadlineExceeded", err)
	}
	msg := []encap.Message{{Buf: []byte("after"), N: 5, Addr: rx.LocalAddr()}}
	if sent, err := rx.WriteBatch(msg); sent != 1 || err != nil {
		t.Fatalf("WriteBatch after StopReading: (%d, %v), want (1, nil)", sent, err)
	}
	in := buffers(1, 100)
	readAll(t, other, in)
	if got := string(in[0].Buf[:in[0].N]); got != "after" {
		t.Errorf("the other descriptor read %q, want %q", got, "after")
	}
}
