package gossip

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// The metadata memberlist gets (NodeMeta) is the last one encoded: callers
// of SetPinnedAddrs and of publishMeta (Run's loop, after our records
// changed) racing each other never leave an older encoding stored over a
// newer one (which would lose the pinned addresses, or the digest, until
// the next change).
func TestMetaPublishKeepsTheLast(t *testing.T) {
	cfg := testConfig(0, 0, nil)
	cfg.Offline, cfg.Tune = true, nil
	n, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	sets := [][]PinnedAddr{
		{{VNI: testVNI, Addr: netip.MustParseAddr("10.42.0.1")}},
		{{VNI: testVNI, Addr: netip.MustParseAddr("10.42.0.2")}, {VNI: testVNI, Addr: netip.MustParseAddr("10.42.0.3")}},
	}
	stale := 0
	const rounds = 20000
	for round := range rounds {
		var wg sync.WaitGroup
		wg.Go(func() {
			if err := n.SetPinnedAddrs(sets[round%2]); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() { n.publishMeta() })
		wg.Wait()
		n.cluster.mu.Lock()
		want := n.encodeSelfLocked()
		n.cluster.mu.Unlock()
		n.meta.mu.Lock()
		got := bytes.Clone(n.meta.encoded)
		n.meta.mu.Unlock()
		if !bytes.Equal(got, want) {
			stale++
		}
	}
	if stale > 0 {
		t.Errorf("%d of %d rounds left an older metadata stored than the node's own", stale, rounds)
	}
}

// heldMeta is a node's memberlist Delegate whose NodeMeta, once armed,
// hands what it read to the test and waits for it: so an update
// (memberlist's UpdateNode, which reads NodeMeta before it numbers the
// update) can be held between the two.
type heldMeta struct {
	memberlist.Delegate
	armed   atomic.Bool
	read    chan []byte
	release chan struct{}
}

func (h *heldMeta) NodeMeta(limit int) []byte {
	b := h.Delegate.NodeMeta(limit)
	if h.armed.CompareAndSwap(true, false) {
		h.read <- b
		<-h.release
	}
	return b
}

// Two updates of the metadata at once (SetPinnedAddrs, publishMeta) reach
// memberlist in the order of what they carry: an update that read the
// older metadata and was held before memberlist numbered it does not
// replace the newer one (memberlist would number it last and keep it: the
// cluster, and the node's own pins, would have the older pinned addresses).
func TestMetaUpdatesInOrder(t *testing.T) { inBubble(t, testMetaUpdatesInOrder) }

func testMetaUpdatesInOrder(t *testing.T) {
	held := &heldMeta{read: make(chan []byte), release: make(chan struct{})}
	cfg := testConfig(0, 0, nil)
	tune := cfg.Tune
	cfg.Tune = func(c *memberlist.Config) {
		tune(c)
		held.Delegate = c.Delegate
		c.Delegate = held
	}
	n := start(t, cfg).Node
	older := []PinnedAddr{{VNI: testVNI, Addr: netip.MustParseAddr("10.42.0.1")}}
	newer := []PinnedAddr{{VNI: testVNI, Addr: netip.MustParseAddr("10.42.0.2")}}

	held.armed.Store(true)
	first := make(chan error, 1)
	go func() { first <- n.SetPinnedAddrs(older) }()
	select {
	case <-held.read: // the first update read the older metadata; memberlist has not numbered it
	case err := <-first:
		t.Fatalf("SetPinnedAddrs returned (%v) without reading the metadata", err)
	}
	second := make(chan error, 1)
	go func() { second <- n.SetPinnedAddrs(newer) }()
	var errs []error
	select {
	case err := <-second: // the second update went out meanwhile (no order kept)
		errs = append(errs, err)
		second = nil
	case <-time.After(time.Second): // it waits for the first one (virtual time: once both wait)
	}
	close(held.release)
	errs = append(errs, <-first)
	if second != nil {
		errs = append(errs, <-second)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	n.meta.mu.Lock()
	want := bytes.Clone(n.meta.encoded)
	n.meta.mu.Unlock()
	got := n.ml.LocalNode().Meta
	gotMeta, err := decodeMeta(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("memberlist publishes our metadata with pinned addresses %v, the node's own is %v", gotMeta.addrs, newer)
	}
	wait.For(t, 10*time.Second, "the node's own pins follow its metadata", func() error {
		n.cluster.mu.Lock()
		defer n.cluster.mu.Unlock()
		if got := n.cluster.members[n.name].meta.addrs; !slices.Equal(got, newer) {
			return fmt.Errorf("its member's pinned addresses are %v, want %v", got, newer)
		}
		return nil
	})
}
