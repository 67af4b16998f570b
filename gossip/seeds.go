package gossip

import (
	"fmt"
	"slices"
)

// SetSeeds replaces the seeds found while the node runs (by a discovery,
// such as the annotations of Kubernetes Nodes), which count beside
// Config.Seeds: those that are not alive members are joined at once, in
// the background, and again every RejoinInterval while they are not. A
// node whose Config.Seeds is empty still founds its cluster at start, so
// two nodes that find each other only later merge then. Seeds are
// "HOST[:PORT]" (port default 7946); a bad one is an error and nothing
// changes. It does not block; it is safe for concurrent use.
func (n *Node) SetSeeds(seeds []string) error {
	found := make([]string, 0, len(seeds))
	for _, s := range seeds {
		seed, err := normSeed(s)
		if err != nil {
			return fmt.Errorf("gossip: seed %q: %w", s, err)
		}
		if seed != n.addr.String() && !slices.Contains(found, seed) {
			found = append(found, seed)
		}
	}
	n.cluster.mu.Lock()
	n.cluster.found = found
	alive := map[string]bool{}
	for _, m := range n.cluster.members {
		if m.alive {
			alive[m.addr.String()] = true
		}
	}
	n.cluster.mu.Unlock()
	var targets []string
	for _, s := range found {
		if !alive[s] {
			targets = append(targets, s)
		}
	}
	if len(targets) == 0 || n.ml == nil {
		return nil
	}
	go func() {
		cnt, err := n.ml.Join(targets)
		n.log.Debug("joined found seeds", "targets", targets, "contacted", cnt, "err", err)
	}()
	return nil
}
