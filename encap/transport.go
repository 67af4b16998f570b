package encap

import (
	"net/netip"
	"sync"
)

// Message is one UDP datagram in a batch.
//
// For ReadBatch, Buf is the caller's buffer to fill (its full length is
// offered to the kernel); on return N holds the datagram length and Addr its
// source. For WriteBatch, Buf[:N] followed by Tail is sent to Addr.
type Message struct {
	Buf []byte
	N   int
	// Tail, for WriteBatch, is the rest of the datagram after Buf[:N]:
	// a payload sent from where it lies (gathered by the kernel, not
	// copied here), behind headers built in Buf. ReadBatch ignores it.
	Tail []byte
	Addr netip.AddrPort
	// Seg, set by ReadBatch on a socket with UDP GRO, is the size of the
	// datagrams the kernel coalesced into Buf[:N]: every Seg bytes start a
	// datagram (the last one may be shorter). 0: Buf[:N] is one datagram.
	Seg int
	// TooBig, set by WriteBatch, says the kernel refused the datagram as
	// too big for the path (EMSGSIZE); WriteBatch clears it on the others.
	TooBig bool
}

// Transport sends and receives UDP datagrams in batches. The engine sees only
// this interface, so it can be tested with an in-memory transport.
//
// ReadBatch and WriteBatch may run concurrently with each other; two
// concurrent ReadBatch calls (or two WriteBatch calls) are not allowed.
// Buffers belong to the caller and are not retained after a call returns.
type Transport interface {
	// ReadBatch blocks until at least one datagram arrives, then fills up
	// to len(msgs) messages and returns how many it filled.
	ReadBatch(msgs []Message) (int, error)

	// WriteBatch sends msgs[i].Buf[:msgs[i].N] and msgs[i].Tail, as one
	// datagram, to msgs[i].Addr for every i,
	// using as few system calls as it can. It tries every message: one that
	// the kernel refuses (unreachable, refused, too big) is skipped and the
	// rest are still sent. It returns how many were sent and the first
	// error seen, or nil when all were sent. Only a closed socket stops it
	// early (net.ErrClosed).
	WriteBatch(msgs []Message) (sent int, err error)

	// BatchSize is the most messages one call handles. It does not change.
	BatchSize() int

	// LocalAddr is the bound address and port.
	LocalAddr() netip.AddrPort

	// Close closes the socket; blocked calls return net.ErrClosed.
	Close() error
}

// SharedSender wraps t so that several engines may send through it at once:
// their WriteBatch calls are serialised by a mutex. ReadBatch, BatchSize and
// LocalAddr pass through; Close does nothing: t's owner (the Demux that
// reads it) closes it once every engine sending through it has stopped, so
// that one engine's stop does not cut another's sends. Use it only where
// engines must share a socket (segments sending from the listening port);
// a socket per engine needs no lock.
func SharedSender(t Transport) Transport { return &sharedSender{Transport: t} }

type sharedSender struct {
	Transport
	mu sync.Mutex
}

// PathMTU passes through to a transport that knows path MTUs (UDPConn).
func (s *sharedSender) PathMTU(dst netip.Addr) int {
	if p, ok := s.Transport.(pathMTUer); ok {
		return p.PathMTU(dst)
	}
	return 0
}

// Close does nothing: see SharedSender.
func (s *sharedSender) Close() error { return nil }

func (s *sharedSender) WriteBatch(msgs []Message) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Transport.WriteBatch(msgs)
}

// Len is the length of the datagram WriteBatch sends for m: Buf[:N] and
// Tail.
func (m *Message) Len() int { return m.N + len(m.Tail) }
