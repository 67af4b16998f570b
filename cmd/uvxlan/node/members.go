package node

// The gossip members the node knew, kept in --state-dir (MembersFile), so
// that a restarted agent whose --join seeds are all unreachable (cut off by
// a partition, down) is back in its cluster through any member it knew,
// instead of staying alone until a seed answers or a member contacts it. A
// hot takeover hands the members over (Handover.Members); a plain restart
// reads them from this file. Both go to gossip.Config.Known: joined at
// start beside the seeds, all at once, the first that answers wins; not
// again by the periodic rejoin, which tries the seeds and the departed
// members memberlist learnt (remembered addresses that are stale would
// otherwise be dialled every RejoinInterval for ever).
//
// The file is one gossip address, "IP:PORT", a line, the members alive at
// the last save first: at most maxRemembered, never the node itself. It is
// saved every membersSaveEvery when the list changed, and at stop. It is
// read bounded (maxMembersFileSize bytes, maxRemembered addresses); a line
// that is not an address is skipped, and a file that is unreadable, too
// large or holds such lines is a warning, never a refusal to start. A
// remembered address that is now someone else's costs one failed dial:
// with a gossip key, joining a node that is not of the cluster fails on the
// key. Without a key (--insecure-gossip), an agent listening there of
// another keyless cluster would be joined, as a stale --join would.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"
)

const (
	// maxRemembered bounds the members kept in MembersFile.
	maxRemembered = 64
	// maxMembersFileSize bounds what is read of MembersFile: maxRemembered
	// lines of the longest address ("[" IPv6 "]:" port, 47 bytes), with
	// room to spare.
	maxMembersFileSize = 8 << 10
	// membersSaveEvery is how often the members are saved when they
	// changed: membership churn costs at most one write per period.
	membersSaveEvery = 10 * time.Second
)

// validMember reports whether a is an address a gossip member can have:
// an IP without zone, neither unspecified nor multicast, and a port.
func validMember(a netip.AddrPort) bool {
	ip := a.Addr()
	return ip.IsValid() && ip.Zone() == "" && !ip.IsUnspecified() && !ip.IsMulticast() &&
		ip != netip.AddrFrom4([4]byte{255, 255, 255, 255}) && a.Port() != 0
}

// encodeMembers is the content of MembersFile for addrs.
func encodeMembers(addrs []netip.AddrPort) []byte {
	var b bytes.Buffer
	for _, a := range addrs {
		b.WriteString(a.String())
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// decodeMembers reads MembersFile's content: the valid addresses, unique,
// in order, at most maxRemembered; skipped counts the lines (not blank)
// that were not such an address, or beyond the bound.
func decodeMembers(b []byte) (addrs []netip.AddrPort, skipped int) {
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		a, err := netip.ParseAddrPort(line)
		if err != nil || len(addrs) == maxRemembered {
			skipped++
			continue
		}
		a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
		if !validMember(a) {
			skipped++
			continue
		}
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	return addrs, skipped
}

// loadMembers reads the members kept in --state-dir, or nil without one,
// without the file, or when it cannot be read (a warning).
func (n *Node) loadMembers() []netip.AddrPort {
	path := n.stateFile(MembersFile)
	if path == "" || n.cfg.GossipOff {
		return nil
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var b []byte
	if err == nil {
		b, err = io.ReadAll(io.LimitReader(f, maxMembersFileSize+1))
		f.Close()
	}
	if err != nil {
		n.log.Warn("ignoring the saved gossip members: unreadable", "file", path, "err", err)
		return nil
	}
	if len(b) > maxMembersFileSize {
		// Only whole lines of the first maxMembersFileSize bytes.
		b = b[:bytes.LastIndexByte(b[:maxMembersFileSize], '\n')+1]
		n.log.Warn("the saved gossip members file is too large; reading its beginning only", "file", path, "max_bytes", maxMembersFileSize)
	}
	addrs, skipped := decodeMembers(b)
	addrs = slices.DeleteFunc(addrs, n.isSelf)
	if skipped > 0 {
		n.log.Warn("skipped lines of the saved gossip members that are not a member's address, or beyond the bound", "file", path,
			"skipped", skipped, "kept", len(addrs), "max", maxRemembered)
	}
	if len(addrs) > 0 {
		n.log.Info("joining the members known before too", "file", path, "members", len(addrs))
	}
	return addrs
}

// isSelf reports whether a is this node's own gossip address.
func (n *Node) isSelf(a netip.AddrPort) bool {
	return n.gossip != nil && a == n.gossip.Addr() ||
		a.Port() == uint16(n.cfg.GossipPort) && (a.Addr() == n.cfg.Local || a.Addr() == n.cfg.GossipAddr)
}

// rememberMembers returns the members to keep: those alive now (sorted, so
// an unchanged cluster gives the same file), then those of before that are
// not, at most maxRemembered, never this node.
func (n *Node) rememberMembers(before []netip.AddrPort) []netip.AddrPort {
	var alive []netip.AddrPort
	for _, m := range n.gossip.Members() {
		if !m.Self && m.State == "alive" && validMember(m.Addr) && !n.isSelf(m.Addr) {
			alive = append(alive, m.Addr)
		}
	}
	slices.SortFunc(alive, func(a, b netip.AddrPort) int { return a.Compare(b) })
	out := alive
	for _, a := range before {
		if !slices.Contains(alive, a) && !n.isSelf(a) {
			out = append(out, a)
		}
	}
	return out[:min(len(out), maxRemembered)]
}

// keepMembers saves the members every membersSaveEvery when they changed,
// and once more when ctx is done. It blocks until then; without a state
// directory or gossip it returns at once.
func (n *Node) keepMembers(ctx context.Context) {
	path := n.stateFile(MembersFile)
	if path == "" || n.cfg.GossipOff {
		return
	}
	known := n.remembered
	var saved []byte
	save := func() {
		known = n.rememberMembers(known)
		if b := encodeMembers(known); !bytes.Equal(b, saved) {
			n.saveState(path, "gossip members", b)
			saved = b
		}
	}
	tick := time.NewTicker(membersSaveEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			save()
			return
		case <-tick.C:
			save()
		}
	}
}
