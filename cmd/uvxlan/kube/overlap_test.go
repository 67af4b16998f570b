package kube

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/gossip/lease"
)

// Overlapping podCIDRs: ours is kept, then the oldest Node's; the others
// are refused, in every direction.
func TestWithoutOverlaps(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	l := func(node, subnet string, created time.Time) lease.Lease {
		return lease.Lease{Node: node, Subnet: netip.MustParsePrefix(subnet), Claimed: created, Self: node == "self"}
	}
	for _, tc := range []struct {
		desc    string
		leases  []lease.Lease
		kept    []string // nodes
		refused map[string]string
	}{
		{"none overlap", []lease.Lease{l("self", "10.244.1.0/24", at(5)), l("b", "10.244.2.0/24", at(1)), l("c", "10.244.3.0/25", at(2))},
			[]string{"b", "c", "self"}, nil},
		{"a newcomer's half of ours", []lease.Lease{l("self", "10.244.1.0/24", at(1)), l("new", "10.244.1.128/25", at(9))},
			[]string{"self"}, map[string]string{"new": `Node "new"'s podCIDR 10.244.1.128/25 overlaps this node's 10.244.1.0/24`}},
		{"an older Node's half of ours: ours still", []lease.Lease{l("self", "10.244.1.0/24", at(9)), l("old", "10.244.1.128/25", at(1))},
			[]string{"self"}, map[string]string{"old": "overlaps this node's"}},
		{"a Node's subnet around ours", []lease.Lease{l("self", "10.244.1.0/24", at(9)), l("big", "10.244.0.0/22", at(1))},
			[]string{"self"}, map[string]string{"big": "overlaps this node's 10.244.1.0/24"}},
		{"two others: the newer inside the older", []lease.Lease{l("self", "10.244.1.0/24", at(0)), l("b", "10.244.4.0/22", at(1)), l("c", "10.244.5.0/24", at(2))},
			[]string{"b", "self"}, map[string]string{"c": `Node "c"'s podCIDR 10.244.5.0/24 overlaps 10.244.4.0/22 of Node "b", created earlier`}},
		{"two others: the newer around the older", []lease.Lease{l("b", "10.244.5.0/24", at(1)), l("c", "10.244.4.0/22", at(2))},
			[]string{"b"}, map[string]string{"c": `overlaps 10.244.5.0/24 of Node "b"`}},
		{"the same subnet, created at once: by name", []lease.Lease{l("d", "10.244.6.0/24", at(3)), l("c", "10.244.6.0/24", at(3))},
			[]string{"c"}, map[string]string{"d": `overlaps 10.244.6.0/24 of Node "c"`}},
		{"a chain: the refused one refuses nobody", []lease.Lease{l("a", "10.244.8.0/24", at(1)), l("b", "10.244.8.0/23", at(2)), l("c", "10.244.9.0/24", at(3))},
			[]string{"a", "c"}, map[string]string{"b": `overlaps 10.244.8.0/24 of Node "a"`}},
	} {
		kept, refused := withoutOverlaps(slices.Clone(tc.leases))
		var names []string
		for _, k := range kept {
			names = append(names, k.Node)
		}
		slices.Sort(names)
		if !slices.Equal(names, tc.kept) {
			t.Errorf("%s: kept %v, want %v", tc.desc, names, tc.kept)
		}
		if len(refused) != len(tc.refused) {
			t.Errorf("%s: refused %v, want %v", tc.desc, refused, tc.refused)
		}
		for node, want := range tc.refused {
			if !strings.Contains(refused[node], want) {
				t.Errorf("%s: %s refused for %q, want %q", tc.desc, node, refused[node], want)
			}
		}
	}
}

// Leases routes no overlapping podCIDR, and counts and logs each refusal
// once, however often it is asked.
func TestLeasesRefuseOverlaps(t *testing.T) {
	logs := &syncBuffer{}
	s := &Subnets{cfg: Config{NodeName: "a", Network: network}, log: slog.New(slog.NewTextHandler(logs, nil)), logged: map[string]logged{}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ann := func(i int) map[string]string {
		return map[string]string{AnnotationVTEP: fmt.Sprintf("198.18.0.%d:4789", i), AnnotationMAC: fmt.Sprintf("02:00:00:00:00:%02x", i)}
	}
	mk := func(name, cidr string, i, minute int) *node {
		n := testNode(name, cidr, ann(i))
		n.Metadata.CreationTimestamp = t0.Add(time.Duration(minute) * time.Minute)
		return n
	}
	s.nodes = map[string]*node{
		"a": mk("a", "10.244.1.0/24", 1, 5),
		"b": mk("b", "10.244.1.128/25", 2, 9), // half of ours
		"c": mk("c", "10.244.2.0/24", 3, 1),
		"d": mk("d", "10.244.2.0/23", 4, 2), // around c's, newer
		"e": mk("e", "10.9.0.0/24", 5, 0),   // outside --network
	}
	subnets := func() []string {
		var out []string
		for _, l := range s.Leases() {
			out = append(out, l.Node+" "+l.Subnet.String())
		}
		slices.Sort(out)
		return out
	}
	for range 3 {
		if got, want := subnets(), []string{"a 10.244.1.0/24", "c 10.244.2.0/24"}; !slices.Equal(got, want) {
			t.Fatalf("leases %v, want %v", got, want)
		}
	}
	if got := s.Stats().RefusedPodCIDRs; got != 3 {
		t.Errorf("refused_podcidrs %d after three reads, want 3 (b, d, e once each)", got)
	}
	for _, want := range []string{
		`node=b err="Node \"b\"'s podCIDR 10.244.1.128/25 overlaps this node's 10.244.1.0/24"`,
		`node=d err="Node \"d\"'s podCIDR 10.244.2.0/23 overlaps 10.244.2.0/24 of Node \"c\", created earlier"`,
		`node=e err="Node \"e\"'s podCIDR 10.9.0.0/24 is outside --network`,
	} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("%d log lines with %s, want 1:\n%s", n, want, logs)
		}
	}
	// c goes: d is routed; b moves away and is routed.
	delete(s.nodes, "c")
	s.nodes["b"] = mk("b", "10.244.4.0/24", 2, 9)
	if got, want := subnets(), []string{"a 10.244.1.0/24", "b 10.244.4.0/24", "d 10.244.2.0/23"}; !slices.Equal(got, want) {
		t.Fatalf("leases %v, want %v", got, want)
	}
	if got := s.Stats().RefusedPodCIDRs; got != 3 {
		t.Errorf("refused_podcidrs %d, want still 3", got)
	}
	if !strings.Contains(logs.String(), "no longer refused") {
		t.Errorf("no log of the refusals that ended:\n%s", logs)
	}
	// A newcomer inside b's: refused, counted.
	s.nodes["f"] = mk("f", "10.244.4.0/25", 6, 10)
	subnets()
	if got := s.Stats().RefusedPodCIDRs; got != 4 {
		t.Errorf("refused_podcidrs %d, want 4", got)
	}
}
