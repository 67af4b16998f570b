package taptest

import (
	"errors"
	"net"
	"os"
	"testing"

	"github.com/uvxlan/uvxlan/tap"
)

// Frames injected are read at the offset; frames written arrive on
// Written; a name is opened once at a time; Close ends Read.
func TestHost(t *testing.T) {
	var h Host
	devs, err := h.OpenTAP(tap.Config{Name: "uvx0", MTU: 1450, MAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, Queues: 4})
	if err != nil || len(devs) != 1 {
		t.Fatalf("OpenTAP: %d devices, %v", len(devs), err)
	}
	if _, err := h.OpenTAP(tap.Config{Name: "uvx0"}); err == nil {
		t.Error("opened uvx0 twice")
	}
	d := h.Device("uvx0")
	if d.Name() != "uvx0" || d.MTU() != 1450 || d.MAC().String() != "02:00:00:00:00:01" {
		t.Errorf("device %s, MTU %d, MAC %s", d.Name(), d.MTU(), d.MAC())
	}
	d.Inject([]byte("one"))
	d.Inject([]byte("two"))
	bufs, sizes := [][]byte{make([]byte, 64), make([]byte, 64)}, make([]int, 2)
	n, err := d.Read(bufs, sizes, 10)
	if n != 2 || err != nil || string(bufs[0][10:10+sizes[0]]) != "one" || string(bufs[1][10:10+sizes[1]]) != "two" {
		t.Errorf("Read: %d, %v, sizes %v", n, err, sizes)
	}
	if n, err := d.Write([][]byte{[]byte("..out")}, 2); n != 1 || err != nil {
		t.Errorf("Write: %d, %v", n, err)
	}
	if f := <-d.Written(); string(f) != "out" {
		t.Errorf("written %q, want out", f)
	}
	d.Close()
	if _, err := d.Read(bufs, sizes, 0); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
	if _, err := h.OpenTAP(tap.Config{Name: "uvx0"}); err != nil {
		t.Errorf("reopening a closed TAP: %v", err)
	}
}
