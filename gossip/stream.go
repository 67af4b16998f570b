package gossip

// Inbound gossip streams, bounded.
//
// memberlist serves every TCP connection to the gossip port (push/pulls,
// joins, TCP fallback pings) in a goroutine of its own, and reads a
// push/pull whole before it can tell whether it is genuine: up to 20 MB
// (its maxPushStateBytes), buffered as it arrives, then decrypted. Anyone
// who reaches the port can send that, key or no key: 30 streams of fake
// ciphertext took an agent to 868 MiB. So New gives memberlist a transport,
// streamTransport, that wraps memberlist's own NetTransport (or the one a
// Tune set) and bounds the inbound streams before memberlist reads them:
//
//   - in number: at most Config.MaxStreams are served at once, at most
//     Config.MaxStreamsPerHost of them from one address. Any other is
//     closed at once, unread (Stats.RefusedStreams). A stream takes its
//     slot when accepted and gives it back when memberlist closes it.
//   - in bytes: the streams open together may have sent at most
//     Config.MaxStreamBytes (a stream's bytes count until it is closed),
//     so each at most that; the read that would go past it fails. An
//     encrypted message whose length field alone says more fails as soon
//     as the field is read (Stats.CutStreams).
//   - in time: a stream's deadline is Config.StreamTimeout after it was
//     accepted; the deadlines memberlist sets cannot move it later
//     (Stats.CutStreams).
//
// Outbound streams (our push/pulls and pings) and UDP are untouched. A node
// whose inbound streams are taken by strangers still syncs through its own
// push/pulls, which carry state both ways, and keeps its membership over
// UDP; what it loses meanwhile is serving others' joins and push/pulls.
//
// Why the bytes are bounded together, and not higher. memberlist buffers an
// encrypted message in a bytes.Buffer that doubles as it grows (a message
// of 8 MiB leaves a 16 MiB buffer and 8 MiB of garbage), and at the rate a
// host sends on a LAN the garbage piles up between collections. Streams of
// exactly the bound, opened as fast as two hosts could (TestGossipStreams
// in cmd/uvxlan), took an agent to 135 MiB of RSS when each of four streams
// could send 8 MiB; to 100 to 122 MiB when they all together could; to 91
// to 98 MiB with 6 MiB together, where memberlist's buffer stops at 8 MiB.
// That was on a quiet machine. On the shared test machine it was 95 to
// 102 MiB, beside one to three CPU hogs 91 to 118 MiB, and 142 MiB once in
// a full run of the tests: the collector marks longer in wall time, what
// memberlist allocates meanwhile counts as live, GOGC doubles that, and
// freed pages wait for the scavenger (at the peaks, 28 to 80 MiB of heap
// objects, most of them garbage, beside 3 to 51 MiB of free pages not yet
// returned; the rest of the RSS, about 16 MiB, is the binary and the
// runtime). Bounding bytes cannot reach that, so the agent also
// bounds the heap while streams arrive (Config.InboundStream; the agent's
// memGuard in cmd/uvxlan/node sets the runtime a soft memory limit derived
// from its heap before the streams and these bounds; the runtime then
// held 55 to 63 MiB, free pages returned): 71 to 72 MiB alone, 72 to 80
// MiB beside one or two hogs, 72 to 93 MiB beside three.
//
// What legitimate gossip needs, in number. Each member push/pulls with one
// random member every PushPullInterval (30 s, scaled up with the cluster:
// every 3 min per member at 1000 members), so a node serves one every few
// minutes on average, for milliseconds on a LAN; add one push/pull per
// joining node (and its settle syncs) and TCP pings when UDP probes fail.
// Eight at once, two per peer, leave room for that, and for a cold start,
// when every node joins the same seeds at once: a refused join is retried
// after a jittered backoff, so the seed serves them eight at a time (it
// was four, which made a cold start of hundreds of nodes a queue of
// refusals). Memory is bounded by the bytes below, shared by all of them,
// not by their number. A refused or cut
// push/pull is the peer's error, and is retried: periodic ones at the next
// interval, joins with backoff.
//
// In bytes (DefaultMaxStreamBytes). A push/pull carries memberlist's node
// states and our state (codec.go: appendState). A node state,
// msgpack-encoded with its field names, is about 100 bytes plus the name
// and the metadata: 600 to 720 bytes with 512 bytes of metadata
// (memberlist.MetaMaxSize; ours is under 100 bytes), so 0.6 to 0.7 MB for
// 1000 members. Our state holds at most maxRecords (65536) records whatever
// the cluster's size; a record takes 43 bytes with 16-byte owner names and
// IPv4, 59 with 32-byte names, 65 with 32-byte names and IPv6, 161 with
// 128-byte names (the maximum). Uncompressed, 1000 members and a full store
// are 3.3 MiB with 16-byte names, 4.3 to 4.7 MiB with 32-byte names and
// 10.8 MiB at the maximum; memberlist compresses push/pulls (LZW) before it
// encrypts them, which made those 2.2, 2.6 to 3.0 and 3.8 MiB on states we
// encoded with random MACs, addresses and metadata. So 6 MiB holds any of
// them compressed, one at a time (two at once up to 3 MiB each), and
// uncompressed those with names up to 32 bytes.
//
// Without a key (--insecure-gossip), memberlist decodes plaintext headers
// and allocates what they announce (a push/pull's node count and user state
// length; a compressed message decompresses to up to 40 MB) before these
// bounds can act: they still bound the streams in number, bytes and time,
// but not those allocations. With a key (the default) memberlist refuses
// plaintext after its first byte.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Defaults of the stream bounds (Config.MaxStreams, MaxStreamsPerHost,
// MaxStreamBytes and StreamTimeout).
const (
	DefaultMaxStreams        = 8
	DefaultMaxStreamsPerHost = 2
	DefaultMaxStreamBytes    = 6 << 20
	DefaultStreamTimeout     = 5 * time.Second
)

const (
	// encryptMsg is the first byte of an encrypted memberlist stream,
	// followed by the ciphertext's length (4 bytes, big endian): its
	// messageType of that name (memberlist's net.go).
	encryptMsg = 10
	// maxRead bounds one read of an inbound stream, and so what a read
	// waiting for data holds of MaxStreamBytes.
	maxRead = 16 << 10
	// streamWarnEvery rate-limits the warnings about refused and cut
	// streams.
	streamWarnEvery = time.Minute
)

// errStreamTooLarge is what the reads of a stream fail with past
// Config.MaxStreamBytes.
var errStreamTooLarge = errors.New("gossip: inbound streams larger than the limit (MaxStreamBytes)")

// streamLimits are the bounds of inbound streams (checked Config values).
type streamLimits struct {
	max, perHost int
	bytes        int64 // all the open streams together
	timeout      time.Duration
	arrived      func() // Config.InboundStream, or nil
}

// streamTransport is a memberlist transport that bounds the inbound streams
// of another (memberlist's NetTransport) in number, size and time; packets
// and outbound streams go through unchanged. Safe for concurrent use.
type streamTransport struct {
	memberlist.NodeAwareTransport
	lim     streamLimits
	log     *slog.Logger
	refused *atomic.Uint64 // Stats.RefusedStreams
	cut     *atomic.Uint64 // Stats.CutStreams

	streams chan net.Conn // to memberlist
	stop    chan struct{} // closed by Shutdown, once the inner transport is down
	done    chan struct{} // closed when pump returns
	once    sync.Once
	err     error // of the inner Shutdown

	mu     sync.Mutex
	open   int                // streams served now
	byHost map[netip.Addr]int // of them, by remote address

	inflight atomic.Int64 // bytes read by the open streams (and asked by their reads): at most lim.bytes

	lastRefusedWarn, lastCutWarn atomic.Int64 // unix nanoseconds
}

var _ memberlist.NodeAwareTransport = (*streamTransport)(nil)

// newStreamTransport bounds the inbound streams of inner, counting refused
// and cut streams in c.
func newStreamTransport(inner memberlist.NodeAwareTransport, lim streamLimits, log *slog.Logger, c *counters) *streamTransport {
	t := &streamTransport{
		NodeAwareTransport: inner,
		lim:                lim,
		log:                log,
		refused:            &c.refusedStreams,
		cut:                &c.cutStreams,
		streams:            make(chan net.Conn),
		stop:               make(chan struct{}),
		done:               make(chan struct{}),
		byHost:             map[netip.Addr]int{},
	}
	go t.pump()
	return t
}

// boundedTransport returns mc's transport, bounded: mc.Transport if a
// Tune set one, or else memberlist's NetTransport on mc.BindAddr and
// mc.BindPort (port 0: one the kernel picks, written back to mc.BindPort
// and mc.AdvertisePort). The caller sets it as mc.Transport.
func boundedTransport(mc *memberlist.Config, lim streamLimits, log *slog.Logger, c *counters) (*streamTransport, error) {
	var inner memberlist.NodeAwareTransport
	switch tr := mc.Transport.(type) {
	case nil:
		nc := &memberlist.NetTransportConfig{BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger, MetricLabels: mc.MetricLabels}
		tries := 1
		if mc.BindPort == 0 {
			tries = 10 // the kernel's TCP port may be taken for UDP: as memberlist does
		}
		var nt *memberlist.NetTransport
		var err error
		for range tries {
			if nt, err = memberlist.NewNetTransport(nc); err == nil || !strings.Contains(err.Error(), "address already in use") {
				break
			}
		}
		if err != nil {
			return nil, err
		}
		if mc.BindPort == 0 {
			mc.BindPort = nt.GetAutoBindPort()
			mc.AdvertisePort = mc.BindPort
		}
		inner = nt
	case memberlist.NodeAwareTransport:
		inner = tr
	default:
		inner = nodeAwareShim{tr}
	}
	return newStreamTransport(inner, lim, log, c), nil
}

// nodeAwareShim makes a Transport a NodeAwareTransport, as memberlist does
// for transports that are not.
type nodeAwareShim struct{ memberlist.Transport }

func (s nodeAwareShim) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return s.WriteTo(b, a.Addr)
}

func (s nodeAwareShim) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return s.DialTimeout(a.Addr, timeout)
}

// StreamCh delivers the admitted inbound streams, bounded (boundedConn).
func (t *streamTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown shuts the inner transport down, then closes the admitted streams
// memberlist has not taken. Later calls return the first one's result.
func (t *streamTransport) Shutdown() error {
	t.once.Do(func() {
		// pump keeps draining the inner transport meanwhile: its
		// listeners may be blocked handing a stream over.
		t.err = t.NodeAwareTransport.Shutdown()
		close(t.stop)
		<-t.done
	})
	return t.err
}

// pump admits or refuses the inner transport's inbound streams, one at a
// time, without reading from them.
func (t *streamTransport) pump() {
	defer close(t.done)
	in := t.NodeAwareTransport.StreamCh()
	for {
		select {
		case c := <-in:
			if bc := t.admit(c); bc != nil {
				select {
				case t.streams <- bc:
				case <-t.stop:
					bc.Close()
					return
				}
			}
		case <-t.stop:
			return
		}
	}
}

// admit takes a slot for c and returns it bounded, or closes c and
// returns nil when there is no slot for it.
func (t *streamTransport) admit(c net.Conn) *boundedConn {
	if t.lim.arrived != nil {
		t.lim.arrived()
	}
	host := remoteAddr(c)
	t.mu.Lock()
	ok := t.open < t.lim.max && t.byHost[host] < t.lim.perHost
	if ok {
		t.open++
		t.byHost[host]++
	}
	open, fromHost := t.open, t.byHost[host]
	t.mu.Unlock()
	if !ok {
		if tc, isTCP := c.(*net.TCPConn); isTCP {
			tc.SetLinger(0) // a reset: no TIME_WAIT left behind by strangers
		}
		c.Close()
		n := t.refused.Add(1)
		t.warn(&t.lastRefusedWarn, "refusing inbound gossip streams: too many open",
			"from", host, "open", open, "from_host", fromHost, "max", t.lim.max, "max_per_host", t.lim.perHost, "refused_streams", n)
		return nil
	}
	bc := &boundedConn{Conn: c, t: t, host: host, deadline: time.Now().Add(t.lim.timeout)}
	c.SetDeadline(bc.deadline)
	return bc
}

// openStreams returns how many inbound streams hold a slot now.
func (t *streamTransport) openStreams() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.open
}

// release gives back the slot of a stream from host.
func (t *streamTransport) release(host netip.Addr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.open--
	if t.byHost[host]--; t.byHost[host] <= 0 {
		delete(t.byHost, host)
	}
}

// cutStream counts a stream cut for why and warns (rate-limited).
func (t *streamTransport) cutStream(host netip.Addr, why string) {
	n := t.cut.Add(1)
	t.warn(&t.lastCutWarn, "cut an inbound gossip stream", "from", host, "reason", why, "cut_streams", n)
}

// warn logs at most once per streamWarnEvery for each last.
func (t *streamTransport) warn(last *atomic.Int64, msg string, args ...any) {
	now := time.Now().UnixNano()
	prev := last.Load()
	if now-prev < int64(streamWarnEvery) || !last.CompareAndSwap(prev, now) {
		return
	}
	t.log.Warn(msg, args...)
}

// remoteAddr is c's remote IP address (the zero Addr if it has none).
func remoteAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	ap, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	return ap.Addr().Unmap()
}

// boundedConn is an admitted inbound stream: its reads fail past the
// streams' bytes, its deadlines are never later than its own, and its Close
// gives its slot and its bytes back. Read and Close are called from one
// goroutine (memberlist's handler of the stream), or Close alone; Write and
// the deadlines are safe for concurrent use.
type boundedConn struct {
	net.Conn
	t        *streamTransport
	host     netip.Addr
	deadline time.Time // accept + StreamTimeout

	read    int64   // bytes read, counted in t.inflight until Close
	head    [5]byte // the first bytes read: encryptMsg | length (4)
	nh      int
	stopped string // why its reads fail, once they do

	cut       atomic.Bool // counted as cut
	closeOnce sync.Once
	closeErr  error
}

func (c *boundedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.stopped == "" {
		if p = c.reserve(p[:min(len(p), maxRead)]); len(p) == 0 {
			c.stopped = fmt.Sprintf("the inbound streams together sent %d bytes, the limit (this one %d)", c.t.lim.bytes, c.read)
		}
	}
	if c.stopped != "" {
		c.cutFor(c.stopped)
		return 0, errStreamTooLarge
	}
	n, err := c.Conn.Read(p)
	c.t.inflight.Add(int64(n - len(p))) // give back what the read did not use
	c.read += int64(n)
	if c.nh < len(c.head) {
		c.nh += copy(c.head[c.nh:], p[:n])
		if c.nh == len(c.head) && c.head[0] == encryptMsg {
			if l := int64(binary.BigEndian.Uint32(c.head[1:])); int64(len(c.head))+l > c.t.lim.bytes {
				c.stopped = fmt.Sprintf("announced %d bytes of ciphertext, the limit is %d", l, c.t.lim.bytes) // the next read fails
			}
		}
	}
	c.checkTimeout(err)
	return n, err
}

// reserve takes room for p in the streams' bytes and returns p cut to the
// room it took: empty when there is none.
func (c *boundedConn) reserve(p []byte) []byte {
	for {
		cur := c.t.inflight.Load()
		k := min(int64(len(p)), max(0, c.t.lim.bytes-cur))
		if c.t.inflight.CompareAndSwap(cur, cur+k) {
			return p[:k]
		}
	}
}

func (c *boundedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.checkTimeout(err)
	return n, err
}

// checkTimeout counts the stream as cut when err is its own deadline's.
func (c *boundedConn) checkTimeout(err error) {
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(c.deadline) {
		c.cutFor(fmt.Sprintf("open longer than %v", c.t.lim.timeout))
	}
}

// cutFor counts the stream as cut, once.
func (c *boundedConn) cutFor(why string) {
	if c.cut.CompareAndSwap(false, true) {
		c.t.cutStream(c.host, why)
	}
}

// clamp returns the deadline to set for a requested one: never later than
// the stream's own, and never none.
func (c *boundedConn) clamp(d time.Time) time.Time {
	if d.IsZero() || d.After(c.deadline) {
		return c.deadline
	}
	return d
}

func (c *boundedConn) SetDeadline(d time.Time) error     { return c.Conn.SetDeadline(c.clamp(d)) }
func (c *boundedConn) SetReadDeadline(d time.Time) error { return c.Conn.SetReadDeadline(c.clamp(d)) }
func (c *boundedConn) SetWriteDeadline(d time.Time) error {
	return c.Conn.SetWriteDeadline(c.clamp(d))
}

// Close closes the stream and gives its slot back. Later calls return the
// first one's result.
func (c *boundedConn) Close() error {
	c.closeOnce.Do(func() {
		c.closeErr = c.Conn.Close()
		c.t.inflight.Add(-c.read)
		c.t.release(c.host)
	})
	return c.closeErr
}
