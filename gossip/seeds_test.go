package gossip

import (
	"testing"
)

// Two nodes that both founded a cluster (no Seeds) merge once one of them
// finds the other (SetSeeds), and a bad seed changes nothing.
func TestSetSeedsMergesFounders(t *testing.T) { inBubble(t, testSetSeedsMergesFounders) }

func testSetSeedsMergesFounders(t *testing.T) {
	a := start(t, testConfig(0, 0, nil))
	b := start(t, testConfig(1, 0, nil))
	nodes := []*testNode{a, b}
	t.Cleanup(func() { stopAll(nodes) })
	if got := a.ml.NumMembers(); got != 1 {
		t.Fatalf("a sees %d members before any seed, want 1", got)
	}
	if err := b.SetSeeds([]string{"bad host:1"}); err == nil {
		t.Error("SetSeeds took a bad seed")
	}
	if err := b.SetSeeds([]string{a.Addr().String(), b.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, nodes)
	b.cluster.mu.Lock()
	found := b.cluster.found
	b.cluster.mu.Unlock()
	if len(found) != 1 || found[0] != a.Addr().String() {
		t.Errorf("found seeds %v, want only a's (not b's own address)", found)
	}
}
