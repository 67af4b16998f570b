// The chaos bench's ground truth: where every MAC and address is, as the
// bench placed them, and how an agent's tables differ from it.

package chaos

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/fdb"
)

// truth is what every agent's tables should hold: each agent's TAP MAC
// behind its VTEP, and each present endpoint's MAC behind the VTEP of the
// host it is on, and its address bound to its MAC.
type truth struct {
	vtep  map[fdb.MAC]netip.Addr // MAC → the VTEP it is behind
	neigh map[netip.Addr]fdb.MAC
}

// Mismatch is one way an agent's table differs from the truth.
type Mismatch struct {
	Node  string `json:"node"`  // the agent's host
	Table string `json:"table"` // "fdb" or "neigh"
	Key   string `json:"key"`   // the MAC (fdb) or the address (neigh)
	Want  string `json:"want,omitempty"`
	Got   string `json:"got,omitempty"`
}

func (m Mismatch) String() string {
	s := fmt.Sprintf("%s %s %s", m.Node, m.Table, m.Key)
	if m.Want != "" {
		s += " want " + m.Want
	}
	if m.Got != "" {
		s += " got " + m.Got
	}
	return s
}

// tableDiff is how the tables of agents differ from the truth.
type tableDiff struct {
	Missing []Mismatch // in the truth, not in the table
	Stale   []Mismatch // in the table, not in the truth
	Wrong   []Mismatch // in both, with another VTEP (fdb), MAC (neigh) or origin
}

func (d *tableDiff) empty() bool { return len(d.Missing)+len(d.Stale)+len(d.Wrong) == 0 }

func (d *tableDiff) add(o tableDiff) {
	d.Missing = append(d.Missing, o.Missing...)
	d.Stale = append(d.Stale, o.Stale...)
	d.Wrong = append(d.Wrong, o.Wrong...)
}

// compare returns how the tables of the agent named node, whose VTEP is
// self, differ from t: an entry behind self must be the agent's own
// (origin local); one behind another VTEP must name that VTEP and not be
// local; a binding must name the right MAC.
func (t truth) compare(node string, self netip.Addr, fdbRows []controlapi.FDBRow, neighRows []controlapi.NeighRow) tableDiff {
	var d tableDiff
	seen := map[fdb.MAC]bool{}
	for _, r := range fdbRows {
		if r.MAC.IsZero() { // a flood-list entry, not an address
			continue
		}
		seen[r.MAC] = true
		want, ok := t.vtep[r.MAC]
		switch {
		case !ok:
			d.Stale = append(d.Stale, Mismatch{Node: node, Table: "fdb", Key: r.MAC.String(), Got: fdbGot(r)})
		case want == self && r.Origin != fdb.OriginLocal:
			d.Wrong = append(d.Wrong, Mismatch{Node: node, Table: "fdb", Key: r.MAC.String(), Want: "local", Got: fdbGot(r)})
		case want != self && (r.VTEP != want || r.Origin == fdb.OriginLocal):
			d.Wrong = append(d.Wrong, Mismatch{Node: node, Table: "fdb", Key: r.MAC.String(), Want: want.String(), Got: fdbGot(r)})
		}
	}
	for _, mac := range sortedKeys(t.vtep, func(a, b fdb.MAC) int { return slices.Compare(a[:], b[:]) }) {
		if !seen[mac] {
			want := t.vtep[mac].String()
			if t.vtep[mac] == self {
				want = "local"
			}
			d.Missing = append(d.Missing, Mismatch{Node: node, Table: "fdb", Key: mac.String(), Want: want})
		}
	}
	bound := map[netip.Addr]bool{}
	for _, r := range neighRows {
		bound[r.IP] = true
		want, ok := t.neigh[r.IP]
		switch {
		case !ok:
			d.Stale = append(d.Stale, Mismatch{Node: node, Table: "neigh", Key: r.IP.String(), Got: r.MAC.String() + " (" + r.Origin.String() + ")"})
		case r.MAC != want:
			d.Wrong = append(d.Wrong, Mismatch{Node: node, Table: "neigh", Key: r.IP.String(), Want: want.String(), Got: r.MAC.String() + " (" + r.Origin.String() + ")"})
		}
	}
	for _, ip := range sortedKeys(t.neigh, func(a, b netip.Addr) int { return a.Compare(b) }) {
		if !bound[ip] {
			d.Missing = append(d.Missing, Mismatch{Node: node, Table: "neigh", Key: ip.String(), Want: t.neigh[ip].String()})
		}
	}
	return d
}

func fdbGot(r controlapi.FDBRow) string {
	if r.Origin == fdb.OriginLocal {
		return "local"
	}
	return r.VTEP.String() + " (" + r.Origin.String() + ")"
}

func sortedKeys[K comparable, V any](m map[K]V, cmp func(a, b K) int) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp)
	return keys
}
