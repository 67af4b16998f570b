package encap

import "sync/atomic"

// DropReason says why a frame or datagram was dropped. Every reason is a
// counter; nothing is logged per packet.
type DropReason uint8

// Receive side (underlay → TAP), in the order they are checked.
const (
	DropShortHeader  DropReason = iota // datagram shorter than the 8-byte VXLAN header
	DropNoIFlag                        // I flag clear: the VNI field is not valid
	DropReservedBits                   // a reserved bit set (strict, like Linux)
	DropWrongVNI                       // VNI is not ours
	DropShortFrame                     // inner frame shorter than an Ethernet header
	DropBadSrcMAC                      // inner source MAC is multicast, broadcast or zero
	DropOwnMAC                         // inner source MAC is our own TAP MAC (a loop)
	DropTAPWrite                       // the TAP refused the frame

	// Transmit side (TAP → underlay).
	DropTxShortFrame // frame read from the TAP shorter than an Ethernet header
	DropNoVTEP       // nowhere to send: unknown destination and an empty flood list
	DropSendError    // the underlay socket refused the datagram

	numDropReasons
)

var dropNames = [numDropReasons]string{
	DropShortHeader:  "short_header",
	DropNoIFlag:      "no_i_flag",
	DropReservedBits: "reserved_bits",
	DropWrongVNI:     "wrong_vni",
	DropShortFrame:   "short_frame",
	DropBadSrcMAC:    "bad_src_mac",
	DropOwnMAC:       "own_mac",
	DropTAPWrite:     "tap_write_error",
	DropTxShortFrame: "tx_short_frame",
	DropNoVTEP:       "no_vtep",
	DropSendError:    "send_error",
}

// String returns the name used in `uvxlan stats` and metrics.
func (r DropReason) String() string {
	if r < numDropReasons {
		return dropNames[r]
	}
	return "unknown"
}

// counters are the engine's live counters, updated with atomics only.
type counters struct {
	rxPackets, rxBytes atomic.Uint64
	txPackets, txBytes atomic.Uint64
	floods             atomic.Uint64 // frames replicated to the flood list
	learned            atomic.Uint64 // new learned entries
	moved              atomic.Uint64 // learned entries that moved to another VTEP
	learnFull          atomic.Uint64 // learning refused: table full
	arpSuppressed      atomic.Uint64 // ARP requests answered from the neighbour table
	arpFlooded         atomic.Uint64 // broadcast ARP requests for unknown addresses, flooded
	snoopDropped       atomic.Uint64 // sightings lost because the Snoop channel was full
	drops              [numDropReasons]atomic.Uint64
}

func (c *counters) drop(r DropReason) { c.drops[r].Add(1) }

// Stats is a snapshot of the engine's counters. Packets and bytes count inner
// Ethernet frames: rx are frames written to the TAP, tx are VXLAN datagrams
// sent to the underlay (a flooded frame counts once per VTEP).
type Stats struct {
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	Floods    uint64 `json:"floods"`
	Learned   uint64 `json:"learned"`
	Moved     uint64 `json:"moved"`
	LearnFull uint64 `json:"learn_refused_full"`
	// ARPSuppressed counts ARP requests answered locally from the
	// neighbour table; ARPFlooded broadcast requests for unknown targets.
	ARPSuppressed uint64            `json:"arp_suppressed"`
	ARPFlooded    uint64            `json:"arp_flooded"`
	SnoopDropped  uint64            `json:"snoop_dropped"`
	Drops         map[string]uint64 `json:"drops"`
}

func (c *counters) snapshot() Stats {
	s := Stats{
		RxPackets:     c.rxPackets.Load(),
		RxBytes:       c.rxBytes.Load(),
		TxPackets:     c.txPackets.Load(),
		TxBytes:       c.txBytes.Load(),
		Floods:        c.floods.Load(),
		Learned:       c.learned.Load(),
		Moved:         c.moved.Load(),
		LearnFull:     c.learnFull.Load(),
		ARPSuppressed: c.arpSuppressed.Load(),
		ARPFlooded:    c.arpFlooded.Load(),
		SnoopDropped:  c.snoopDropped.Load(),
		Drops:         make(map[string]uint64, numDropReasons),
	}
	for i := range c.drops {
		s.Drops[DropReason(i).String()] = c.drops[i].Load()
	}
	return s
}

// Add returns the sum of s and o: the counters of several engines (one per
// TAP queue) as one.
func (s Stats) Add(o Stats) Stats {
	sum := Stats{
		RxPackets: s.RxPackets + o.RxPackets, RxBytes: s.RxBytes + o.RxBytes,
		TxPackets: s.TxPackets + o.TxPackets, TxBytes: s.TxBytes + o.TxBytes,
		Floods: s.Floods + o.Floods, Learned: s.Learned + o.Learned, Moved: s.Moved + o.Moved,
		LearnFull: s.LearnFull + o.LearnFull, ARPSuppressed: s.ARPSuppressed + o.ARPSuppressed,
		ARPFlooded: s.ARPFlooded + o.ARPFlooded, SnoopDropped: s.SnoopDropped + o.SnoopDropped,
		Drops: make(map[string]uint64, numDropReasons),
	}
	for k, v := range s.Drops {
		sum.Drops[k] += v
	}
	for k, v := range o.Drops {
		sum.Drops[k] += v
	}
	return sum
}
