package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// logCounter counts log messages containing any of its needles, across the
// nodes that log to it.
type logCounter struct {
	needles []string
	mu      sync.Mutex
	seen    map[string][]string // needle → messages
}

func newLogCounter(needles ...string) *logCounter {
	return &logCounter{needles: needles, seen: map[string][]string{}}
}

func (lc *logCounter) logger(name string) *slog.Logger {
	return slog.New(&recordHandler{fn: func(level, msg string) {
		for _, n := range lc.needles {
			if strings.Contains(msg, n) {
				lc.mu.Lock()
				lc.seen[n] = append(lc.seen[n], name+": "+level+" "+msg)
				lc.mu.Unlock()
			}
		}
	}})
}

func (lc *logCounter) check(t *testing.T) {
	t.Helper()
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for n, msgs := range lc.seen {
		t.Errorf("%d log messages with %q, want none: %q", len(msgs), n, msgs)
	}
}

// runDuplicate runs a node from cfg (another node's name) until Run returns
// and gives Run's error; it fails the test if Run does not return.
func runDuplicate(t *testing.T, cfg Config) error {
	t.Helper()
	n, err := New(inNetwork(t, cfg))
	if err != nil {
		t.Fatalf("New(%s): %v", cfg.Name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	start := time.Now()
	err = n.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("the duplicate %s at %s ran until the test stopped it (Run: %v): it was not refused", cfg.Name, n.Addr(), err)
	}
	t.Logf("the duplicate at %s: Run returned after %v: %v", n.Addr(), time.Since(start).Round(time.Millisecond), err)
	return err
}

// wantNameTaken checks a duplicate's Run error: ErrNameTaken, naming the
// name and the holder's address.
func wantNameTaken(t *testing.T, err error, name string, holder netip.AddrPort) {
	t.Helper()
	if !errors.Is(err, ErrNameTaken) {
		t.Fatalf("Run of the duplicate: %v, want ErrNameTaken", err)
	}
	if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("%q", name)) || !strings.Contains(msg, holder.String()) {
		t.Errorf("Run of the duplicate: %q, want the name %q and the member's address %s named", msg, name, holder)
	}
}

// memberAlive checks that n sees name alive at addr, owning entries entries.
func memberAlive(n *Node, name string, addr netip.AddrPort, entries int) error {
	for _, m := range n.Members() {
		if m.Name != name {
			continue
		}
		if m.State != "alive" || m.Addr != addr || m.Entries != entries {
			return fmt.Errorf("%s sees %s as %+v, want alive at %s with %d entries", n.name, name, m, addr, entries)
		}
		return nil
	}
	return fmt.Errorf("%s does not know %s", n.name, name)
}

// A second node under the name of a live member, joining through that
// member or through another one, is refused: its Run fails with
// ErrNameTaken naming the member's address, and the member keeps its
// entries and its membership everywhere, with nothing refuted, reannounced
// or marked dead.
func TestDuplicateNameRefused(t *testing.T) { inBubble(t, testDuplicateNameRefused) }

func testDuplicateNameRefused(t *testing.T) {
	logs := newLogCounter("Refuting an alive message", "Refuting a dead message", "Conflicting address")
	nodes := make([]*testNode, 3)
	for i := range nodes {
		cfg := testConfig(i, 0, nil)
		cfg.Logger = logs.logger(cfg.Name)
		if i > 0 {
			cfg.Seeds = []string{nodes[0].Addr().String()}
		}
		nodes[i] = start(t, cfg)
	}
	t.Cleanup(func() { stopAll(nodes) })
	waitMembers(t, nodes)
	holder := nodes[0]
	endpoint, ip := fdb.MAC{0x02, 0xee, 0, 0, 0, 1}, netip.MustParseAddr("10.100.0.1")
	if err := holder.AnnounceMAC(testVNI, endpoint); err != nil {
		t.Fatal(err)
	}
	if err := holder.AnnounceNeigh(testVNI, ip, endpoint); err != nil {
		t.Fatal(err)
	}
	const entries = 3 // TAP MAC, endpoint, binding
	wait.For(t, converge, "the holder's entries everywhere", func() error {
		if err := fdbOn(nodes, holder.name, testVNI, endpoint, testVTEP(0))(); err != nil {
			return err
		}
		return memberAlive(nodes[2].Node, holder.name, holder.Addr(), entries)
	})
	reannounced := holder.Stats().Reannounced

	for i, via := range []*testNode{nodes[0], nodes[1]} { // no t.Run in a bubble
		cfg := testConfig(5+i, 0, nil)
		cfg.Name = holder.name
		cfg.Seeds = []string{via.Addr().String()}
		cfg.Logger = logs.logger("duplicate")
		wantNameTaken(t, runDuplicate(t, cfg), holder.name, holder.Addr())
		// It refuses after it sent its state: perhaps after Run returned.
		wait.For(t, 5*time.Second, via.name+" counts the refusal", func() error {
			if via.Stats().RefusedNodes == 0 {
				return errors.New("no refused node")
			}
			return nil
		})
	}

	// Time for probes, gossip and periodic push/pulls to go around: a
	// duplicate that got in would show by now.
	time.Sleep(2 * testPushPull)
	for _, n := range nodes {
		if err := memberAlive(n.Node, holder.name, holder.Addr(), entries); err != nil {
			t.Error(err)
		}
		for _, m := range n.Members() {
			if m.Addr.Addr() == testAddr(5) || m.Addr.Addr() == testAddr(6) {
				t.Errorf("%s lists the duplicate: %+v", n.name, m)
			}
		}
		if _, ok := n.fdb.Lookup(testVNI, testMAC(5)); ok {
			t.Errorf("%s has the duplicate's TAP MAC", n.name)
		}
	}
	if err := fdbOn(nodes, holder.name, testVNI, endpoint, testVTEP(0))(); err != nil {
		t.Error(err)
	}
	if err := neighOn(nodes, holder.name, testVNI, ip, endpoint)(); err != nil {
		t.Error(err)
	}
	if got := holder.Stats().Reannounced; got != reannounced {
		t.Errorf("the holder reannounced %d records after the duplicate tried, want none", got-reannounced)
	}
	logs.check(t)
}

// A node that waits alone for its seeds (not joined yet) keeps its name when
// a duplicate, started later, joins it: the duplicate is the newcomer.
func TestDuplicateNameAloneHolder(t *testing.T) { inBubble(t, testDuplicateNameAloneHolder) }

func testDuplicateNameAloneHolder(t *testing.T) {
	cfg := testConfig(0, 0, nil)
	cfg.Seeds = []string{"127.0.0.1:1"} // nobody there
	holder := start(t, cfg)
	if holder.joined.Load() {
		t.Fatal("the holder joined nobody")
	}
	dup := testConfig(5, 0, nil)
	dup.Name = holder.name
	dup.Seeds = []string{holder.Addr().String()}
	wantNameTaken(t, runDuplicate(t, dup), holder.name, holder.Addr())
	select {
	case <-holder.done:
		t.Fatal("the holder stopped")
	case <-holder.failed:
		t.Fatalf("the holder failed: %v", holder.failErr)
	default:
	}
}
