package encap

// flowHash hashes the inner flow of an Ethernet frame (at least 14 bytes):
// for IPv4 and IPv6, the addresses, the protocol and, for TCP/UDP/SCTP when
// the packet is not a non-first fragment, the ports; otherwise the MACs and
// EtherType. Frames of one flow always hash alike, so one flow keeps one outer
// source port and is never reordered across ECMP paths. FNV-1a, no allocation.
func flowHash(frame []byte) uint32 {
	const (
		offset32 = 2166136261
		prime32  = 16777619
	)
	h := uint32(offset32)
	mix := func(b []byte) {
		for _, c := range b {
			h ^= uint32(c)
			h *= prime32
		}
	}
	etype := uint16(frame[12])<<8 | uint16(frame[13])
	l3 := frame[ethHeaderLen:]
	switch {
	case etype == 0x0800 && len(l3) >= 20 && l3[0]>>4 == 4:
		ihl := int(l3[0]&0x0f) * 4
		mix(l3[12:20]) // source and destination address
		mix(l3[9:10])  // protocol
		fragOff := (uint16(l3[6])<<8 | uint16(l3[7])) & 0x1fff
		if fragOff == 0 && hasPorts(l3[9]) && len(l3) >= ihl+4 && ihl >= 20 {
			mix(l3[ihl : ihl+4])
		}
	case etype == 0x86dd && len(l3) >= 40 && l3[0]>>4 == 6:
		mix(l3[8:40]) // source and destination address
		mix(l3[6:7])  // next header (extension headers are not walked)
		if hasPorts(l3[6]) && len(l3) >= 44 {
			mix(l3[40:44])
		}
	default:
		mix(frame[0:14])
	}
	return h
}

func hasPorts(proto byte) bool { return proto == 6 || proto == 17 || proto == 132 }
