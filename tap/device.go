package tap

import "net"

// Device is a source and sink of Ethernet frames, read and written in batches.
//
// Buffers belong to the caller. Frames are read to and written from
// bufs[i][offset:], so the caller keeps offset bytes of headroom in front of
// every frame (for the outer headers it will prepend in place).
//
// Read and Write may be called concurrently with each other, but Read must not
// be called concurrently with Read, nor Write with Write.
type Device interface {
	// Read blocks until at least one frame is available, then reads up to
	// len(bufs) frames. Frame i is placed at bufs[i][offset:] and its length
	// stored in sizes[i]. len(sizes) must be >= len(bufs). It returns the
	// number of frames read. A frame longer than the buffer is truncated
	// by the kernel; callers size buffers for MTU + 14 bytes.
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)

	// Write writes every bufs[i][offset:] as one frame. It returns the number
	// of frames written; on error, the frames after the failing one are not
	// written. It touches no byte outside the frames (the bytes before offset
	// may belong to another frame), though it may rewrite the headers of
	// frames it coalesces into one, and complete L4 checksums their
	// sender left partial.
	Write(bufs [][]byte, offset int) (n int, err error)

	// BatchSize is the most frames one Read returns. It does not change over
	// the lifetime of the device.
	BatchSize() int

	// Name is the interface name, such as uvx0.
	Name() string

	// MAC is the device's Ethernet address. Callers must not modify it.
	MAC() net.HardwareAddr

	// MTU is the device's MTU (the largest frame payload, without the
	// 14-byte Ethernet header).
	MTU() int

	// Close releases the device; a blocked Read or Write returns an error.
	Close() error
}

// Poller is a Device whose Read can be split in two: a TryRead that never
// blocks (and can hand over a frame's payload without copying it) and a
// WaitRead that blocks between the caller's tries, so that the caller may
// also keep trying for a while before it sleeps (busy-polling).
type Poller interface {
	// TryRead reads like Device.Read but returns at once, with n == 0
	// when no frame is ready. drained reports that the device was found
	// empty (a wait is due); false means the buffers ran out first. It
	// must not run concurrently with another TryRead or Read.
	//
	// tails, when not nil (and as long as bufs), lets the device return a
	// frame in two parts without copying the second: bufs[i][offset:]
	// holds sizes[i] bytes (the headers) and tails[i] the rest (a
	// payload, in the device's own memory, valid until the next read), or
	// nil for a frame read whole.
	TryRead(bufs [][]byte, sizes []int, tails [][]byte, offset int) (n int, drained bool, err error)

	// WaitRead calls try, and again whenever the device may have become
	// readable, until try returns true; it blocks in between. try reads
	// with TryRead (until the device is drained, or the wait could miss
	// a frame that arrived before it) and says whether to stop. WaitRead
	// returns an error once the device is closed. One goroutine at a time
	// may wait.
	WaitRead(try func() bool) error
}

// PartialReader is a Device that can leave partial the TCP and UDP
// checksums of the frames it reads, as the host's kernel left them for the
// device to finish (FlagNeedsCsum): the field holds the pseudo-header sum,
// which the reader completes (CompletePartial) before the frame goes to
// anyone who does not take partial checksums (see partial.go).
type PartialReader interface {
	// LeavePartial turns it on, and reports whether reads may now return
	// partial checksums (false: the device finishes them all, as before).
	// It must be called before the first read.
	LeavePartial() bool
}
