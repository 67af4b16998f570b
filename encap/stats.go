package encap

import (
	"encoding/json"
	"sync/atomic"
)

// Every counter of the data path is declared once, here: its index, its
// name (the JSON key of `uvxlan stats --json` and the Prometheus series
// uvxlan_<name>_total) and its help text. The snapshot, the JSON and the
// metrics are derived from these tables; tests walk them.

// Counter names one of the data path's counters. All of them only grow.
type Counter uint8

// The counters. Packets and bytes count inner Ethernet frames: rx are frames
// written to the TAP, tx are VXLAN datagrams sent to the underlay (a flooded
// frame counts once per VTEP).
const (
	RxPackets         Counter = iota // frames received from the underlay and written to the TAP
	RxBytes                          // bytes of those frames
	TxPackets                        // datagrams sent to the underlay
	TxBytes                          // bytes of inner frames sent
	Floods                           // frames replicated to the flood list
	Learned                          // new learned entries
	Moved                            // learned entries that moved to another VTEP
	LearnRefusedFull                 // learning refused: table full
	LearnRefusedQuota                // learning refused: the VTEP has --max-endpoints learned entries
	ARPSuppressed                    // ARP requests answered from the neighbour table
	ARPFlooded                       // broadcast ARP requests for unknown addresses, flooded
	NDSuppressed                     // Neighbor Solicitations answered from the neighbour table
	SnoopDropped                     // sightings lost because the Snoop channel was full
	ProbesSent                       // liveness probes written into the TAP
	ProbeAnswers                     // answers to them, read from the TAP
	TooBig                           // ICMP too-big errors written into the TAP
	PMTUProbes                       // path MTU probes received from members
	PMTUAcks                         // acks to our path MTU probes received
	// RxPartialCsum counts frames written to the TAP whose inner TCP or
	// UDP checksum the sender left partial; the TAP counts them, the node
	// adds them to its segment's snapshot.
	RxPartialCsum
	// TxPartialCsum counts frames sent with their inner TCP or UDP
	// checksum left partial, to members that take them (see partial.go).
	TxPartialCsum
	// BFD (bfd.go): the answers for the BFD source address, the control
	// packets handed to the node and those it sent.
	BFDAddrAnswers
	BFDReceived
	BFDSent
	// MoveDiscoveries and MoveAnnouncements count the frames the node
	// writes into the TAP for silent IP moves (see move.go).
	MoveDiscoveries
	MoveAnnouncements

	NumCounters
)

// Desc declares a counter or a drop reason: its name and its help text.
type Desc struct {
	Name string
	Help string
}

var counterDescs = [NumCounters]Desc{
	RxPackets:         {"rx_packets", "Frames received from the underlay and written to the TAP."},
	RxBytes:           {"rx_bytes", "Bytes of inner frames written to the TAP."},
	TxPackets:         {"tx_packets", "VXLAN datagrams sent to the underlay (a flooded frame counts once per VTEP)."},
	TxBytes:           {"tx_bytes", "Bytes of inner frames sent to the underlay."},
	Floods:            {"floods", "Frames replicated to the flood list (broadcast, multicast, unknown unicast)."},
	Learned:           {"learned", "FDB entries learned from received frames."},
	Moved:             {"moved", "Learned FDB entries that moved to another VTEP."},
	LearnRefusedFull:  {"learn_refused_full", "Learning refused because the FDB is full."},
	LearnRefusedQuota: {"learn_refused_quota", "Learning refused because the VTEP (a static peer or an --allow-vtep one; nothing is learned from members) has --max-endpoints learned entries."},
	ARPSuppressed:     {"arp_suppressed", "ARP requests answered locally from the neighbour table."},
	ARPFlooded:        {"arp_flooded", "Broadcast ARP requests for unknown addresses, flooded."},
	NDSuppressed:      {"nd_suppressed", "IPv6 Neighbor Solicitations (address resolution, not DAD) answered locally from the neighbour table."},
	SnoopDropped:      {"snoop_dropped", "Endpoint sightings lost because the agent was busy (they recur with the next frame)."},
	ProbesSent:        {"probes_sent", "Liveness probes (ARP requests) written into the TAP to silent endpoints."},
	ProbeAnswers:      {"probe_answers", "Answers to liveness probes read from the TAP."},
	TooBig:            {"too_big", "ICMP errors (IPv4 fragmentation needed, IPv6 packet too big) written into the TAP to senders of frames too big for the underlay path (see drops too_big)."},
	PMTUProbes:        {"pmtu_probes", "Path MTU probes received from members (answered by the agent, never written to the TAP)."},
	PMTUAcks:          {"pmtu_acks", "Acks to this agent's path MTU probes received from members."},
	RxPartialCsum:     {"rx_partial_checksums", "Frames from the underlay whose inner TCP or UDP checksum the sender left partial for a NIC to finish (a kernel VXLAN device with checksum offload, behind a veth, or an agent that leaves them so for members that take them): completed, or handed to the TAP as needing one, instead of written broken."},
	BFDAddrAnswers:    {"bfd_addr_answers", "ARP requests and Neighbor Solicitations from behind the TAP for the BFD source address (--bfd-source), answered by the agent with its BFD MAC, and announcements of that address to endpoints whose session is not up."},
	BFDReceived:       {"bfd_received", "BFD control packets read from the TAP and handed to the sessions."},
	BFDSent:           {"bfd_sent", "BFD control packets written into the TAP."},
	TxPartialCsum:     {"tx_partial_checksums", "Frames sent with their inner TCP or UDP checksum left partial (the pseudo-header sum, as the host's kernel left it for the TAP to finish), to a member that takes them (--partial-checksums): its TAP finishes it only if the frame leaves its host."},
	MoveDiscoveries:   {"move_discoveries", "Requests for an address whose binding was withdrawn (a broadcast ARP probe, a multicast Neighbor Solicitation) written into the TAP, so that an endpoint holding it now, silent so far, answers and is bound."},
	MoveAnnouncements: {"move_announcements", "Gratuitous ARP replies and unsolicited Neighbor Advertisements written into the TAP for an address bound to a new MAC after its binding was withdrawn or moved, so that kernels behind the TAP drop the old MAC at once."},
}

// Desc returns the counter's declaration.
func (c Counter) Desc() Desc {
	if c < NumCounters {
		return counterDescs[c]
	}
	return Desc{Name: "unknown"}
}

// String returns the counter's name.
func (c Counter) String() string { return c.Desc().Name }

// DropReason says why a frame or datagram was dropped. Every reason is a
// counter; nothing is logged per packet.
type DropReason uint8

// Receive side (underlay → TAP), in the order they are checked.
const (
	DropShortHeader  DropReason = iota // datagram shorter than the 8-byte VXLAN header
	DropNoIFlag                        // I flag clear: the VNI field is not valid
	DropReservedBits                   // a reserved bit set (strict, like Linux)
	DropWrongVNI                       // no segment serves the VNI
	DropUnknownVTEP                    // the source is no member, static peer or --allow-vtep range of the VNI
	DropShortFrame                     // inner frame shorter than an Ethernet header
	DropBadSrcMAC                      // inner source MAC is multicast, broadcast or zero
	DropOwnMAC                         // inner source MAC is our own TAP MAC (a loop)
	DropTAPWrite                       // the TAP refused the frame

	// Transmit side (TAP → underlay).
	DropTxShortFrame // frame read from the TAP shorter than an Ethernet header
	DropNoVTEP       // nowhere to send: unknown destination and an empty flood list
	DropBUMLimited   // broadcast, multicast or unknown unicast over the segment's --bum-rate
	DropSendError    // the underlay socket refused the datagram
	// DropTAPSplit counts super-frames read from a TAP with offloads that
	// could not be split into segments; the TAP counts them, the node adds
	// them to its segment's snapshot.
	DropTAPSplit
	// DropPinnedAddr counts ARP packets from behind the TAP whose sender
	// claims an address pinned to another node (its TAP address), and
	// Neighbor Solicitations whose source or Advertisements whose target
	// is one; and, received from the underlay, ARP packets and Neighbor
	// Solicitations or Advertisements that bind an address pinned to a
	// node to a MAC that is not that node's.
	DropPinnedAddr
	// DropTooBig counts frames from the TAP too big for the underlay
	// path: longer than the underlay MTU allows, or refused by the socket
	// with EMSGSIZE. IPv4 ones with DF set and IPv6 ones are answered
	// with an ICMP error (counter TooBig) unless rate-limited.
	DropTooBig
	// DropTAPQueue counts frames the kernel dropped on their way from the
	// host into the TAP because its queue to the agent was full (the
	// TAP's tx_dropped); the node adds them to its segment's snapshot.
	DropTAPQueue

	// Receive side again.
	//
	// DropSrcPort counts datagrams from a member's address but from a
	// source port its agent does not hold (see filter.go).
	DropSrcPort
	// DropForeignMAC counts frames whose inner source MAC gossip places
	// behind another VTEP than the datagram's source.
	DropForeignMAC

	// The encrypted wire (EngineConfig.ESP, package esp). Receive side:
	// datagrams dropped before anything is read from them or learned.
	DropESPUnknownSPI   // ESP from a member with no SA of that SPI (not yet agreed, or long gone)
	DropESPAuth         // ESP that fails authentication (forged, corrupted, malformed)
	DropESPReplay       // ESP with a sequence number already seen, or older than the window
	DropPlainFromMember // plain VXLAN from a member that encrypts
	// Transmit side: a frame for a member that encrypts, while no key is
	// agreed with it yet (it is never sent in plain).
	DropESPNoKey

	// BFD (bfd.go), transmit side: frames to the BFD MAC and address that
	// are no BFD packet, and packets lost because the node was busy.
	DropBFDFrame
	DropBFDQueue
	// DropNotRouterMAC counts frames received on the L3 VNI
	// (EngineConfig.Routed) not addressed to the router MAC.
	DropNotRouterMAC

	NumDropReasons
)

var dropDescs = [NumDropReasons]Desc{
	DropShortHeader:     {"short_header", "Datagrams shorter than a VXLAN header."},
	DropNoIFlag:         {"no_i_flag", "Datagrams without the VXLAN I flag."},
	DropReservedBits:    {"reserved_bits", "Datagrams with a reserved VXLAN bit set."},
	DropWrongVNI:        {"wrong_vni", "Datagrams for a VNI no segment of this agent serves."},
	DropUnknownVTEP:     {"unknown_vtep", "Datagrams from a source that is no alive member serving the VNI, no static peer and in no --allow-vtep range."},
	DropShortFrame:      {"short_frame", "Datagrams whose inner frame is shorter than an Ethernet header."},
	DropBadSrcMAC:       {"bad_src_mac", "Inner frames with a multicast, broadcast or zero source MAC."},
	DropOwnMAC:          {"own_mac", "Inner frames with our own TAP MAC as source (a loop)."},
	DropTAPWrite:        {"tap_write_error", "Frames the TAP refused."},
	DropTxShortFrame:    {"tx_short_frame", "Frames read from the TAP shorter than an Ethernet header."},
	DropNoVTEP:          {"no_vtep", "Frames with nowhere to go: unknown destination and an empty flood list."},
	DropBUMLimited:      {"bum_rate_limited", "Broadcast, multicast and unknown unicast frames over the segment's --bum-rate, not flooded."},
	DropSendError:       {"send_error", "Datagrams the underlay socket refused."},
	DropTAPSplit:        {"tap_split_error", "Super-frames from the TAP that could not be split into segments."},
	DropPinnedAddr:      {"pinned_address", "ARP and ND packets from behind the TAP claiming an address pinned to another node (its TAP address), and ARP and ND packets from the underlay binding an address pinned to a node to a MAC not its own."},
	DropSrcPort:         {"src_port", "Datagrams from a member's address but not from a source port its agent holds (announced in its gossip metadata): another process on its host."},
	DropForeignMAC:      {"foreign_mac", "Inner frames whose source MAC gossip places behind another VTEP than the datagram's source."},
	DropESPUnknownSPI:   {"esp_unknown_spi", "ESP datagrams from a member with no security association of their SPI (keys not agreed yet, or retired)."},
	DropESPAuth:         {"esp_auth_failed", "ESP datagrams that failed authentication: forged, corrupted or malformed."},
	DropESPReplay:       {"esp_replay", "ESP datagrams whose sequence number was seen already or is older than the anti-replay window: replays."},
	DropPlainFromMember: {"plain_from_encrypting_member", "Plain VXLAN datagrams from the address of a member that encrypts (--encrypt): forged, or a misconfigured member."},
	DropESPNoKey:        {"esp_no_key", "Frames for a member that encrypts, dropped because no key is agreed with it yet (never sent in plain)."},
	DropBFDFrame:        {"bfd_bad_frame", "IP packets to the BFD source address (--bfd-source) from behind the TAP that are no BFD control packet: not UDP to port 3784, fragmented, lengths that disagree, a bad IPv4 header checksum."},
	DropBFDQueue:        {"bfd_queue_full", "BFD control packets from behind the TAP lost because the agent was busy (the session's detection time covers a few)."},
	DropNotRouterMAC:    {"not_router_mac", "Frames received on the L3 VNI (--l3vni) not addressed to this agent's router MAC."},
	DropTAPQueue:        {"tap_queue_full", "Frames the kernel dropped on their way from the host into the TAP (its tx_dropped since the agent opened it): they came faster than the agent read them, and a Linux TAP drops rather than make the sender wait."},
	DropTooBig:          {"too_big", "Frames from the TAP too big for the underlay path (--underlay-mtu, or refused by the socket); the sender is told with an ICMP error (counter too_big) unless rate-limited."},
}

// Desc returns the reason's declaration.
func (r DropReason) Desc() Desc {
	if r < NumDropReasons {
		return dropDescs[r]
	}
	return Desc{Name: "unknown"}
}

// String returns the name used in `uvxlan stats` and metrics.
func (r DropReason) String() string { return r.Desc().Name }

// counters are the live counters, updated with atomics only.
type counters struct {
	c     [NumCounters]atomic.Uint64
	drops [NumDropReasons]atomic.Uint64
}

func (c *counters) add(k Counter, v uint64) { c.c[k].Add(v) }
func (c *counters) drop(r DropReason)       { c.drops[r].Add(1) }

func (c *counters) snapshot() Stats {
	var s Stats
	for i := range c.c {
		s.Counters[i] = c.c[i].Load()
	}
	for i := range c.drops {
		s.Drops[i] = c.drops[i].Load()
	}
	return s
}

// Stats is a snapshot of counters: Counters indexed by Counter, Drops by
// DropReason. Its JSON is one object with a key per counter and "drops", an
// object keyed by reason.
type Stats struct {
	Counters [NumCounters]uint64
	Drops    [NumDropReasons]uint64
}

// Get returns counter c.
func (s Stats) Get(c Counter) uint64 { return s.Counters[c] }

// Add returns the sum of s and o: the counters of several engines (one per
// TAP queue, or one per segment) as one.
func (s Stats) Add(o Stats) Stats {
	for i := range s.Counters {
		s.Counters[i] += o.Counters[i]
	}
	for i := range s.Drops {
		s.Drops[i] += o.Drops[i]
	}
	return s
}

// Map returns the counters as a map by name, drops under "drops".
func (s Stats) Map() map[string]any {
	m := make(map[string]any, NumCounters+1)
	for i, v := range s.Counters {
		m[Counter(i).String()] = v
	}
	drops := make(map[string]uint64, NumDropReasons)
	for i, v := range s.Drops {
		drops[DropReason(i).String()] = v
	}
	m["drops"] = drops
	return m
}

// MarshalJSON writes {"rx_packets": N, …, "drops": {"short_header": N, …}}.
func (s Stats) MarshalJSON() ([]byte, error) { return json.Marshal(s.Map()) }

// UnmarshalJSON reads what MarshalJSON writes; unknown keys are ignored
// (an agent newer than its client).
func (s *Stats) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*s = Stats{}
	for i := range s.Counters {
		if v, ok := raw[Counter(i).String()]; ok {
			if err := json.Unmarshal(v, &s.Counters[i]); err != nil {
				return err
			}
		}
	}
	if v, ok := raw["drops"]; ok {
		var drops map[string]uint64
		if err := json.Unmarshal(v, &drops); err != nil {
			return err
		}
		for i := range s.Drops {
			s.Drops[i] = drops[DropReason(i).String()]
		}
	}
	return nil
}
