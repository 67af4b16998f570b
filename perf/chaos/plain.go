// The chaos bench's wire check: a capture on every host's underlay of the
// plain (not ESP) VXLAN datagrams it sends to another member. With
// --encrypt there must be none, ever: not at the start before keys are
// agreed, not across restarts, takeovers, partitions or loss.

package chaos

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/uvxlan/uvxlan/testenv"
)

// chaosVXLANPort is the agents' VXLAN port (uvxlan's default): plain
// VXLAN and, with --encrypt, ESP in UDP travel on it.
const chaosVXLANPort = 4789

// plainSnap is the capture's snap length: Ethernet, IPv4 (with room for
// options), UDP and the VXLAN header are all the check reads.
const plainSnap = 96

// plainFilter selects the datagrams src sends to the VXLAN port of another
// member that are no ESP: encap/esp.IsESP's test of the first byte (an ESP
// SPI's high bit set, VXLAN's reserved bit clear), done by the kernel, so
// that an encrypted run writes nothing.
func plainFilter(src netip.Addr, members []netip.Addr) string {
	var dst []string
	for _, m := range members {
		if m != src {
			dst = append(dst, "dst host "+m.String())
		}
	}
	return fmt.Sprintf("udp and src host %s and dst port %d and (udp[8] & 0x88) != 0x80 and (%s)",
		src, chaosVXLANPort, strings.Join(dst, " or "))
}

// plainCapture is the captures of every host's underlay.
type plainCapture struct {
	paths []string
	stops []func() error
}

// startPlainCapture starts a capture on the underlay interface of each of
// hosts (the members': not the EVPN fabric's, whose kernel VTEP speaks
// plain VXLAN) of what plainFilter selects, written under dir. Each returns once tcpdump
// listens: nothing the agents send afterwards is missed.
func startPlainCapture(ctx context.Context, tb *testenv.Testbed, hosts []*testenv.Host, dir string) (*plainCapture, error) {
	var members []netip.Addr
	for _, h := range hosts {
		members = append(members, h.Underlay)
	}
	c := &plainCapture{}
	for _, h := range hosts {
		path := filepath.Join(dir, h.Name+"-plain.pcap")
		stop, err := tb.Capture(ctx, h, testenv.UnderlayIface, plainFilter(h.Underlay, members), path, "-s", fmt.Sprint(plainSnap))
		if err != nil {
			c.stop()
			return nil, fmt.Errorf("chaos: underlay capture: %w", err)
		}
		c.paths, c.stops = append(c.paths, path), append(c.stops, stop)
	}
	return c, nil
}

// stop stops every capture.
func (c *plainCapture) stop() error {
	var errs []error
	for _, stop := range c.stops {
		errs = append(errs, stop())
	}
	c.stops = nil
	return errors.Join(errs...)
}

// count stops the captures and counts what they caught: how many plain
// datagrams, and the first few as "src -> dst".
func (c *plainCapture) count() (n int, first []string, err error) {
	err = c.stop()
	for _, p := range c.paths {
		f, ferr := os.Open(p)
		if ferr != nil {
			err = errors.Join(err, ferr)
			continue
		}
		m, fs, rerr := countDatagrams(f, 5-len(first))
		f.Close()
		n += m
		first = append(first, fs...)
		if rerr != nil {
			err = errors.Join(err, fmt.Errorf("chaos: %s: %w", filepath.Base(p), rerr))
		}
	}
	return n, first, err
}

// pcap's file format (libpcap's, tcpdump -w): a 24-byte header, then
// per packet a 16-byte record header and the captured bytes.
const (
	pcapHeaderLen       = 24
	pcapRecordHeaderLen = 16
	pcapLinkEthernet    = 1
	pcapMaxRecord       = 1 << 18
)

// countDatagrams reads a pcap file of Ethernet frames and counts its
// records, returning the IPv4 source and destination of the first limit of
// them as "src -> dst". A truncated last record counts (tcpdump stopped
// mid-write); a file that is no pcap of Ethernet is an error.
func countDatagrams(r io.Reader, limit int) (n int, first []string, err error) {
	var hdr [pcapHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, nil // tcpdump killed before it wrote its header: nothing caught
		}
		return 0, nil, fmt.Errorf("pcap header: %w", err)
	}
	var bo binary.ByteOrder
	switch binary.LittleEndian.Uint32(hdr[0:]) {
	case 0xa1b2c3d4, 0xa1b23c4d:
		bo = binary.LittleEndian
	case 0xd4c3b2a1, 0x4d3cb2a1:
		bo = binary.BigEndian
	default:
		return 0, nil, fmt.Errorf("not a pcap file (magic %#x)", hdr[0:4])
	}
	if lt := bo.Uint32(hdr[20:]) & 0xffff; lt != pcapLinkEthernet {
		return 0, nil, fmt.Errorf("pcap link type %d, want Ethernet", lt)
	}
	var rec [pcapRecordHeaderLen]byte
	buf := make([]byte, 0, plainSnap)
	for {
		if _, err := io.ReadFull(r, rec[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return n, first, nil
			}
			return n + 1, first, nil // a record header cut short: counted
		}
		incl := bo.Uint32(rec[8:])
		if incl > pcapMaxRecord {
			return n, first, fmt.Errorf("pcap record %d: length %d", n+1, incl)
		}
		n++
		keep := min(int(incl), cap(buf))
		buf = buf[:keep]
		got, err := io.ReadFull(r, buf)
		if len(first) < limit {
			if s, ok := ipv4Pair(buf[:got]); ok {
				first = append(first, s)
			}
		}
		if err != nil {
			return n, first, nil // cut short: counted
		}
		if _, err := io.CopyN(io.Discard, r, int64(incl)-int64(keep)); err != nil {
			return n, first, nil
		}
	}
}

// ipv4Pair returns "src -> dst" of an Ethernet frame holding IPv4.
func ipv4Pair(frame []byte) (string, bool) {
	const eth = 14
	if len(frame) < eth+20 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
		return "", false
	}
	src := netip.AddrFrom4([4]byte(frame[eth+12 : eth+16]))
	dst := netip.AddrFrom4([4]byte(frame[eth+16 : eth+20]))
	return src.String() + " -> " + dst.String(), true
}
