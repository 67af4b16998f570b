// The chaos bench's traffic: a mesh of sequence-numbered UDP probes
// between every two endpoints, sent by this process through a socket it
// opened inside each endpoint's namespace, and the gaps and losses each
// directed pair saw.

package chaos

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
)

const (
	// meshPort is the UDP port of every endpoint's probe socket.
	meshPort = 7777
	// MeshInterval is how often each endpoint probes each other one.
	MeshInterval = 200 * time.Millisecond
	// MeshHotInterval is how often it does while a short fault (a
	// restart, a takeover, a move) touches either end: fine enough for
	// gaps of tens of milliseconds.
	MeshHotInterval = 20 * time.Millisecond
	meshTick        = 5 * time.Millisecond
	meshMagic       = 0x75766378 // "uvcx"
	meshProbeLen    = 16
)

// mesh sends a probe from every endpoint to every other one each
// MeshInterval (MeshHotInterval while either is hot) and records, per
// directed pair, when each probe left and when it arrived. It is safe for
// concurrent use; what it recorded is read after stop.
type mesh struct {
	start time.Time
	conns []*net.UDPConn // by endpoint index
	addrs []netip.AddrPort
	// hotUntil[e] is when endpoint e stops being hot, as time since start.
	hotUntil []atomic.Int64

	// sent[s][d][seq] is when probe seq from s to d left (since start);
	// written by the sender goroutine only.
	sent [][][]time.Duration
	// recv[d][s][seq] is when it arrived (0: never); written by d's
	// receiver goroutine, under rmu[d].
	recv [][][]time.Duration
	rmu  []sync.Mutex

	stopSend chan struct{}
	stopRecv atomic.Bool
	wg       sync.WaitGroup
	sendWG   sync.WaitGroup
}

// newMesh opens a probe socket in each endpoint's namespace: it keeps its
// namespace when the endpoint's link changes (a move, a vanish), so a
// pair's identity survives them.
func newMesh(eps []*testenv.Host) (*mesh, error) {
	n := len(eps)
	m := &mesh{conns: make([]*net.UDPConn, n), hotUntil: make([]atomic.Int64, n), stopSend: make(chan struct{})}
	for i, ep := range eps {
		err := ep.Do(func() error {
			c, err := net.ListenUDP("udp4", &net.UDPAddr{Port: meshPort})
			m.conns[i] = c
			return err
		})
		if err != nil {
			m.close()
			return nil, err
		}
		m.addrs = append(m.addrs, netip.AddrPortFrom(ep.Prefix.Addr(), meshPort))
	}
	m.sent = make([][][]time.Duration, n)
	m.recv = make([][][]time.Duration, n)
	m.rmu = make([]sync.Mutex, n)
	for i := range n {
		m.sent[i] = make([][]time.Duration, n)
		m.recv[i] = make([][]time.Duration, n)
	}
	return m, nil
}

func (m *mesh) close() {
	for _, c := range m.conns {
		if c != nil {
			c.Close()
		}
	}
}

// now is the time since the mesh started.
func (m *mesh) now() time.Duration { return time.Since(m.start) }

// run starts the sender and the receivers.
func (m *mesh) run() {
	m.start = time.Now()
	for d := range m.conns {
		m.wg.Add(1)
		go m.receive(d)
	}
	m.sendWG.Add(1)
	go m.send()
}

// setHot makes the endpoints hot until the time since start.
func (m *mesh) setHot(eps []int, until time.Duration) {
	for _, e := range eps {
		for {
			old := m.hotUntil[e].Load()
			if int64(until) <= old || m.hotUntil[e].CompareAndSwap(old, int64(until)) {
				break
			}
		}
	}
}

func (m *mesh) hot(e int, now time.Duration) bool { return time.Duration(m.hotUntil[e].Load()) > now }

func (m *mesh) send() {
	defer m.sendWG.Done()
	n := len(m.conns)
	next := make([][]time.Duration, n)
	for s := range n {
		next[s] = make([]time.Duration, n)
		for d := range n { // spread the probes over the interval
			next[s][d] = time.Duration((s*n+d)%40) * MeshInterval / 40
		}
	}
	buf := make([]byte, meshProbeLen)
	tick := time.NewTicker(meshTick)
	defer tick.Stop()
	for {
		select {
		case <-m.stopSend:
			return
		case <-tick.C:
		}
		now := m.now()
		for s := range n {
			hs := m.hot(s, now)
			for d := range n {
				if d == s || now < next[s][d] {
					continue
				}
				iv := MeshInterval
				if hs || m.hot(d, now) {
					iv = MeshHotInterval
				}
				next[s][d] = now + iv
				seq := len(m.sent[s][d])
				binary.BigEndian.PutUint32(buf[0:], meshMagic)
				binary.BigEndian.PutUint16(buf[4:], uint16(s))
				binary.BigEndian.PutUint16(buf[6:], uint16(d))
				binary.BigEndian.PutUint32(buf[8:], uint32(seq))
				// A send that fails (an endpoint without its link) is a
				// probe lost like any other.
				_, _ = m.conns[s].WriteToUDPAddrPort(buf, m.addrs[d])
				m.sent[s][d] = append(m.sent[s][d], now)
			}
		}
	}
}

func (m *mesh) receive(d int) {
	defer m.wg.Done()
	buf := make([]byte, 64)
	for !m.stopRecv.Load() {
		m.conns[d].SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, _, err := m.conns[d].ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		at := m.now()
		if n < meshProbeLen || binary.BigEndian.Uint32(buf) != meshMagic || int(binary.BigEndian.Uint16(buf[6:])) != d {
			continue
		}
		s, seq := int(binary.BigEndian.Uint16(buf[4:])), int(binary.BigEndian.Uint32(buf[8:]))
		if s >= len(m.conns) || seq > 1<<24 {
			continue
		}
		m.rmu[d].Lock()
		r := m.recv[d][s]
		if seq >= len(r) {
			r = slices.Grow(r, seq+1-len(r))[:seq+1]
		}
		if r[seq] == 0 {
			r[seq] = at
		}
		m.recv[d][s] = r
		m.rmu[d].Unlock()
	}
}

// stop stops the probes, waits grace for the last ones to arrive, and
// stops the receivers.
func (m *mesh) stop(grace time.Duration) {
	close(m.stopSend)
	m.sendWG.Wait()
	time.Sleep(grace)
	m.stopRecv.Store(true)
	m.wg.Wait()
	m.close()
}

// arrivals returns the arrival times of the probes from s to d, sorted.
func (m *mesh) arrivals(s, d int) []time.Duration {
	var a []time.Duration
	for _, t := range m.recv[d][s] {
		if t != 0 {
			a = append(a, t)
		}
	}
	slices.Sort(a)
	return a
}

// received reports whether probe seq from s to d arrived.
func (m *mesh) received(s, d, seq int) bool {
	r := m.recv[d][s]
	return seq < len(r) && r[seq] != 0
}

// longestGap returns the longest time between two consecutive arrivals
// (or from the last arrival to end) that began within [from-slack, to],
// and when it began. clean is false when the pair was already down at
// from: a gap that began before from-slack lasted past from+slack (or
// nothing arrived before from), so what happened in the window is not the
// window's to tell.
func longestGap(arrivals []time.Duration, from, to, end, slack time.Duration) (gap, at time.Duration, clean bool) {
	if len(arrivals) == 0 || arrivals[0] > from {
		return 0, 0, false
	}
	clean = true
	for i, a := range arrivals {
		next := end
		if i+1 < len(arrivals) {
			next = arrivals[i+1]
		}
		switch {
		case a < from-slack:
			if next > from+slack {
				clean = false
			}
		case a <= to && next-a > gap:
			gap, at = next-a, a
		}
	}
	return gap, at, clean
}

// recentlyAll reports whether every directed pair got a probe within the
// last d: the mesh is whole.
func (m *mesh) recentlyAll(within time.Duration) (bool, [][2]int) {
	now := m.now()
	var missing [][2]int
	for d := range m.conns {
		for s := range m.conns {
			if s == d {
				continue
			}
			ok := false
			m.rmu[d].Lock()
			r := m.recv[d][s]
			for i := len(r) - 1; i >= 0 && i >= len(r)-100; i-- {
				if r[i] != 0 && now-r[i] < within {
					ok = true
					break
				}
			}
			m.rmu[d].Unlock()
			if !ok {
				missing = append(missing, [2]int{s, d})
			}
		}
	}
	return len(missing) == 0, missing
}
