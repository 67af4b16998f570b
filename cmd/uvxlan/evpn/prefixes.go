package evpn

// The prefix limit of each peer (Config.MaxPrefixes, RFC 4486), counted
// as routes arrive. GoBGP has one (PrefixLimit on the peer's address
// family), but it counts by walking the peer's whole Adj-RIB-In, copying
// every route, after each UPDATE: a peer sending its routes one per UPDATE
// would cost the square of them (30 000 routes, packed as a route
// reflector packs them, took twice the CPU of the import itself). So the
// speaker counts the routes each peer sent that stand (GoBGP's
// pre-policy updates, work per UPDATE proportional to it) and, when a
// peer passes its limit, sets GoBGP's limit on it: GoBGP counts once,
// sends the Cease (Maximum Number of Prefixes Reached) and withdraws the
// peer's routes. After Config.PrefixRestart the limit is lifted again and
// the session started (peerEvent, restart).

import (
	"context"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
)

// pathUpdates counts the routes each peer sent (GoBGP's pre-policy
// updates), and closes the session of a peer past its limit.
func (s *Speaker) pathUpdates(paths []*apiutil.Path, _ time.Time) {
	var over []Peer
	s.mu.Lock()
	for _, p := range paths {
		if p.Nlri == nil {
			continue
		}
		ss := s.sessions[p.PeerAddress.Unmap()]
		if ss == nil || ss.limited {
			continue
		}
		k := p.Nlri.String()
		if p.Withdrawal {
			delete(ss.prefixes, k)
			continue
		}
		ss.prefixes[k] = struct{}{}
		if len(ss.prefixes) > int(s.cfg.MaxPrefixes) {
			ss.limited = true
			clear(ss.prefixes)
			over = append(over, ss.peer)
		}
	}
	s.mu.Unlock()
	for _, p := range over {
		go s.limit(p)
	}
}

// limit sets GoBGP's prefix limit on p, which is past it: GoBGP closes
// the session with a Cease (Maximum Number of Prefixes Reached).
func (s *Speaker) limit(p Peer) {
	if _, err := s.bgp.UpdatePeer(context.Background(), &api.UpdatePeerRequest{Peer: s.peerConf(p, s.cfg.MaxPrefixes)}); err != nil {
		s.log.Warn("BGP peer past its prefix limit not closed", "peer", p.Addr, "err", err)
	}
}
