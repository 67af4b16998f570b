// Package taptest is an in-memory tap.Device for tests, as wireguard-go's
// tun/tuntest is for its tun.Device: a test writes frames into a Device as
// the host's kernel would send them through the TAP, and reads the frames
// the agent wrote into it. Host opens such devices by name where the agent
// opens TAPs (it has tap.OpenQueues' shape). Safe for concurrent use.
package taptest

import (
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/uvxlan/uvxlan/tap"
)

// Queue is how many frames wait in each direction; beyond it Inject
// blocks, and frames the agent writes are dropped (Dropped), as a TAP's
// queue drops.
const Queue = 1024

// Device is an in-memory TAP: one queue, plain frames, no offloads.
type Device struct {
	name    string
	mac     net.HardwareAddr
	mtu     int
	in      chan []byte // from the host, read by the agent
	out     chan []byte // written by the agent, read by the test
	closed  chan struct{}
	once    sync.Once
	mu      sync.Mutex
	dropped int
}

var _ tap.Device = (*Device)(nil)

// New returns an open device.
func New(name string, mac net.HardwareAddr, mtu int) *Device {
	return &Device{name: name, mac: mac, mtu: mtu, in: make(chan []byte, Queue), out: make(chan []byte, Queue), closed: make(chan struct{})}
}

// Inject hands frame (copied) to the agent's next Read, as if the host
// sent it through the TAP. It blocks while Queue frames wait.
func (d *Device) Inject(frame []byte) {
	select {
	case d.in <- append([]byte(nil), frame...):
	case <-d.closed:
	}
}

// Written is where the frames the agent wrote arrive, in order; each is
// the test's.
func (d *Device) Written() <-chan []byte { return d.out }

// Dropped is how many written frames found the queue full.
func (d *Device) Dropped() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dropped
}

// Read waits for one frame, then takes those already waiting, up to
// len(bufs).
func (d *Device) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n := 0
	select {
	case f := <-d.in:
		sizes[n] = copy(bufs[n][offset:], f)
		n++
	case <-d.closed:
		return 0, os.ErrClosed
	}
	for n < len(bufs) {
		select {
		case f := <-d.in:
			sizes[n] = copy(bufs[n][offset:], f)
			n++
		default:
			return n, nil
		}
	}
	return n, nil
}

// Write copies every frame to Written.
func (d *Device) Write(bufs [][]byte, offset int) (int, error) {
	for i, b := range bufs {
		select {
		case <-d.closed:
			return i, os.ErrClosed
		default:
		}
		select {
		case d.out <- append([]byte(nil), b[offset:]...):
		default:
			d.mu.Lock()
			d.dropped++
			d.mu.Unlock()
		}
	}
	return len(bufs), nil
}

func (d *Device) BatchSize() int        { return 64 }
func (d *Device) Name() string          { return d.name }
func (d *Device) MAC() net.HardwareAddr { return d.mac }
func (d *Device) MTU() int              { return d.mtu }

// Close makes blocked and later Reads and Writes fail.
func (d *Device) Close() error {
	d.once.Do(func() { close(d.closed) })
	return nil
}

// Host opens Devices by name, in place of the kernel's TAPs. The zero
// value is ready to use.
type Host struct {
	mu   sync.Mutex
	devs map[string]*Device
}

// OpenTAP opens one Device (whatever cfg.Queues asks: a TAP that refused
// queues) named cfg.Name, with cfg.MAC (a random local MAC when nil) and
// cfg.MTU. A name still open is refused, as the kernel refuses a second
// open of a single-queue TAP.
func (h *Host) OpenTAP(cfg tap.Config) ([]tap.Device, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d := h.devs[cfg.Name]; d != nil && !d.isClosed() {
		return nil, fmt.Errorf("taptest: %s is open", cfg.Name)
	}
	if h.devs == nil {
		h.devs = map[string]*Device{}
	}
	mac := cfg.MAC
	if mac == nil {
		mac = net.HardwareAddr{0x02, 0x7e, 0x57, 0, 0, byte(len(h.devs))}
	}
	d := New(cfg.Name, mac, cfg.MTU)
	h.devs[cfg.Name] = d
	return []tap.Device{d}, nil
}

// Device returns the device opened last under name, or nil.
func (h *Host) Device(name string) *Device {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.devs[name]
}

func (d *Device) isClosed() bool {
	select {
	case <-d.closed:
		return true
	default:
		return false
	}
}
