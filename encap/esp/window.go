package esp

import (
	"encoding/binary"
	"fmt"
)

// window is the anti-replay window of an inbound SA: the sliding bitmap of
// RFC 4303 Appendix A, kept as a ring of 64-bit blocks (RFC 6479) so that
// sliding clears whole blocks instead of shifting bits. It remembers the
// windowSize sequence numbers below the highest seen; anything older is
// refused. The window is wide because one SA's datagrams come from several
// source ports (the sender's sockets) and arrive on several receiving
// queues, so they are reordered by up to a few batches.
type window struct {
	last uint64 // highest sequence number recorded
	ring [ringBlocks]uint64
}

const (
	ringBlocks = 128 // a power of 2
	windowSize = (ringBlocks - 1) * 64
)

// check reports whether seq would be accepted: not seen, not too old.
func (w *window) check(seq uint64) bool {
	if seq > w.last {
		return true
	}
	if w.last-seq >= windowSize {
		return false
	}
	return w.ring[(seq/64)%ringBlocks]&(1<<(seq%64)) == 0
}

// record marks seq seen, sliding the window when seq is the highest yet,
// and reports whether it was new.
func (w *window) record(seq uint64) bool {
	if !w.check(seq) {
		return false
	}
	if seq > w.last {
		cur, next := w.last/64, seq/64
		for i, n := cur+1, uint64(0); i <= next && n < ringBlocks; i, n = i+1, n+1 {
			w.ring[i%ringBlocks] = 0
		}
		w.last = seq
	}
	w.ring[(seq/64)%ringBlocks] |= 1 << (seq % 64)
	return true
}

// WindowLen is the size of a marshalled window: the highest sequence
// number recorded (8 bytes, big endian), then the ring's blocks (8 bytes
// each, big endian, block 0 first).
const WindowLen = 8 + ringBlocks*8

// MarshalBinary writes the window (WindowLen bytes).
func (w *window) MarshalBinary() ([]byte, error) {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, WindowLen), w.last)
	for _, blk := range w.ring {
		b = binary.BigEndian.AppendUint64(b, blk)
	}
	return b, nil
}

// UnmarshalBinary reads a window MarshalBinary wrote; nil leaves w as it
// is. Any WindowLen bytes are a window: at worst one that refuses more.
func (w *window) UnmarshalBinary(b []byte) error {
	if b == nil {
		return nil
	}
	if len(b) != WindowLen {
		return fmt.Errorf("esp: replay window of %d bytes, want %d", len(b), WindowLen)
	}
	w.last = binary.BigEndian.Uint64(b)
	for i := range w.ring {
		w.ring[i] = binary.BigEndian.Uint64(b[8+8*i:])
	}
	return nil
}

// refuseAll makes check refuse every sequence number an SA sends (they
// stay below maxSeq): all are seen or too old.
func (w *window) refuseAll() {
	w.last = maxSeq
	for i := range w.ring {
		w.ring[i] = ^uint64(0)
	}
}
