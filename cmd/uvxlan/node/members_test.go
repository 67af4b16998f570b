package node

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// manyMembers is n distinct member addresses, 198.18.x.y:7946.
func manyMembers(n int) []netip.AddrPort {
	var out []netip.AddrPort
	for i := range n {
		out = append(out, netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), 7946))
	}
	return out
}

func TestDecodeMembers(t *testing.T) {
	ap := netip.MustParseAddrPort
	for _, tc := range []struct {
		desc    string
		in      string
		want    []netip.AddrPort
		skipped int
	}{
		{desc: "empty", in: ""},
		{desc: "two, one IPv6", in: "198.18.0.2:7946\n[2001:db8::3]:7000\n", want: []netip.AddrPort{ap("198.18.0.2:7946"), ap("[2001:db8::3]:7000")}},
		{desc: "blank lines, spaces, CRLF, no final newline", in: "\n  198.18.0.2:7946 \r\n\n198.18.0.3:7946", want: []netip.AddrPort{ap("198.18.0.2:7946"), ap("198.18.0.3:7946")}},
		{desc: "duplicates kept once", in: "198.18.0.2:7946\n198.18.0.2:7946\n", want: []netip.AddrPort{ap("198.18.0.2:7946")}},
		{desc: "IPv4-mapped IPv6 unmapped", in: "[::ffff:198.18.0.2]:7946\n", want: []netip.AddrPort{ap("198.18.0.2:7946")}},
		{desc: "garbage", in: "\x00\xff\xfe garbage\n{\"json\": 1}\n", skipped: 2},
		{desc: "not member addresses", in: "198.18.0.2\nhost.example:7946\n0.0.0.0:7946\n[::]:7946\n224.0.0.1:7946\n255.255.255.255:7946\n198.18.0.2:0\n[fe80::1%eth0]:7946\n198.18.0.2:99999\n",
			skipped: 9},
		{desc: "the good among the bad", in: "bad\n198.18.0.9:7946\n", want: []netip.AddrPort{ap("198.18.0.9:7946")}, skipped: 1},
		{desc: "thousands: the first maxRemembered", in: string(encodeMembers(manyMembers(3000))), want: manyMembers(maxRemembered), skipped: 3000 - maxRemembered},
	} {
		got, skipped := decodeMembers([]byte(tc.in))
		if !slices.Equal(got, tc.want) || skipped != tc.skipped {
			t.Errorf("%s: got %v, %d skipped; want %v, %d skipped", tc.desc, got, skipped, tc.want, tc.skipped)
		}
	}
}

// A hostile or broken members file is bounded and a warning, never a
// failure: garbage, a huge file, thousands of addresses, this node's own
// address, a directory in its place.
func TestLoadMembersHostile(t *testing.T) {
	self := "198.18.0.1:7946"
	huge := strings.Repeat("198.18.7.7:7946\n", 1<<16) // 1 MiB
	for _, tc := range []struct {
		desc     string
		content  string // "" with dir: a directory in the file's place
		dir      bool
		want     int
		warnings []string
	}{
		{desc: "garbage", content: "\x00\x01 garbage\xff\n", warnings: []string{"skipped lines of the saved gossip members"}},
		{desc: "huge", content: huge, want: 1, warnings: []string{"too large"}},
		{desc: "huge, one line", content: strings.Repeat("x", 1<<20), warnings: []string{"too large"}},
		// 198.18.0.1:7946, this node, is among the first maxRemembered.
		{desc: "thousands", content: string(encodeMembers(manyMembers(5000))), want: maxRemembered - 1, warnings: []string{"beyond the bound"}},
		{desc: "itself only", content: self + "\n"},
		{desc: "a directory", dir: true, warnings: []string{"ignoring the saved gossip members: unreadable"}},
	} {
		dir := t.TempDir()
		path := filepath.Join(dir, MembersFile)
		var err error
		if tc.dir {
			err = os.Mkdir(path, 0o755)
		} else {
			err = os.WriteFile(path, []byte(tc.content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		n, logs := stateNode(dir)
		n.cfg.GossipPort = 7946
		got := n.loadMembers()
		if len(got) != tc.want || slices.Contains(got, netip.MustParseAddrPort(self)) {
			t.Errorf("%s: loaded %d members %v, want %d, never itself", tc.desc, len(got), got[:min(len(got), 3)], tc.want)
		}
		for _, w := range tc.warnings {
			if !strings.Contains(logs.String(), w) {
				t.Errorf("%s: no warning %q:\n%s", tc.desc, w, logs)
			}
		}
		if len(tc.warnings) == 0 && strings.Contains(logs.String(), "WARN") {
			t.Errorf("%s: unexpected warning:\n%s", tc.desc, logs)
		}
	}
}

// Without --state-dir, or without the file, nothing is remembered and
// nothing is said.
func TestLoadMembersAbsent(t *testing.T) {
	for _, dir := range []string{"", t.TempDir()} {
		n, logs := stateNode(dir)
		if got := n.loadMembers(); got != nil || logs.Len() != 0 {
			t.Errorf("state dir %q: loaded %v\n%s", dir, got, logs)
		}
	}
}

// Anything that decodes encodes back to what decodes the same, within the
// bound, every address valid and once.
func FuzzDecodeMembers(f *testing.F) {
	f.Add([]byte("198.18.0.2:7946\n[2001:db8::3]:7000\n"))
	f.Add([]byte("garbage\n0.0.0.0:1\n[::ffff:1.2.3.4]:5\n"))
	f.Add(encodeMembers(manyMembers(100)))
	f.Fuzz(func(t *testing.T, b []byte) {
		addrs, _ := decodeMembers(b)
		if len(addrs) > maxRemembered {
			t.Fatalf("%d addresses, more than %d", len(addrs), maxRemembered)
		}
		for i, a := range addrs {
			if !validMember(a) || slices.Contains(addrs[:i], a) {
				t.Fatalf("address %v invalid or repeated in %v", a, addrs)
			}
		}
		again, skipped := decodeMembers(encodeMembers(addrs))
		if !slices.Equal(again, addrs) || skipped != 0 {
			t.Fatalf("round trip: %v (%d skipped), want %v", again, skipped, addrs)
		}
	})
}
