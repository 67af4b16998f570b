// Package esp implements the encrypted wire between uvxlan members: ESP
// (RFC 4303) in transport mode around the VXLAN datagram, encapsulated in
// UDP (RFC 3948), with AES-128-GCM (RFC 4106, 16-byte ICV, 8-byte explicit
// IV) and 64-bit extended sequence numbers, an anti-replay window, and the
// keys of each pair of members derived from an authenticated X25519
// exchange. Nothing here is a new construction: the wire is what IPsec
// sends, so tshark decodes it and, given the keys (KeyLog), decrypts it.
//
// # The datagram
//
//	outer IP | UDP (to the VXLAN port, --port) |
//	  SPI (4) | sequence number, low 32 bits (4) |          ESP header
//	  IV (8) = the 64-bit sequence number |
//	  [ UDP (8): ports 4789, checksum 0 |
//	    VXLAN header (8) | Ethernet frame |
//	    padding (0-3) | pad length (1) | next header (1) = 17 (UDP) ] encrypted
//	  ICV (16)
//
// The protected payload is the VXLAN datagram with a UDP header (next
// header 17, transport mode): decrypted, it is plain VXLAN to any
// dissector. That inner header says 4789 (VXLAN's IANA port) whatever
// --port is, and its checksum is 0 (RFC 3948 §3.1.2 lets the receiver skip
// it: the ICV covers the bytes). Overhead: 45 bytes at most (Overhead) on
// top of VXLAN's 50.
//
// ESP rides the VXLAN port, not 4500: one socket, one batch, one filter,
// one handover. A receiver tells them apart by the first byte: VXLAN's is
// its flags, 0x08 (the I flag; uvxlan refuses reserved bits), while every
// SPI this package makes has its top bit set and bit 0x08 of its first byte
// clear (IsESP). RFC 3948's non-ESP marker (four zero bytes) is unused:
// there is no IKE. For tshark, decode the port as UDP-encapsulated ESP
// (TsharkArgs: `-d udp.port==PORT,udpencap`, Wireshark's dissector that
// takes what is not the non-ESP marker for ESP). With --port 4789 that
// rule also catches the decrypted inner datagram (its port is 4789 too);
// captures meant for tshark run with another --port (8472, Linux's default,
// as the tests do), or read the field esp.decrypted_data.
//
// The IV is the 64-bit sequence number, so under one key a nonce never
// repeats: a sequence number is used once (SA.Seal takes it with an atomic
// increment) and a key is used by one sender (one SA per direction of a
// pair). The AAD is the SPI and the 64-bit sequence number (RFC 4106 §5,
// with ESN). The receiver reads the high 32 bits from the IV, which the
// ICV authenticates, and checks the low ones against the header's.
//
// # Keys
//
// Every member has a static X25519 key (its identity, kept in --state-dir;
// its public half travels in its gossip metadata, authenticated by the
// cluster's gossip key) and an ephemeral X25519 key that it replaces every
// rekey interval (2 minutes) and publishes through gossip. The SA from A to
// B is derived (Derive) with HKDF-SHA256 from X25519(eA, eB) ‖ X25519(sA, sB),
// with the four public keys (sender's first) in the info: the static-static
// DH binds it to both identities, the ephemeral-ephemeral DH gives forward
// secrecy once the ephemerals are wiped. Its output is the AES key, the GCM
// salt and the SPI, so each new pair of ephemerals, and every restart
// (new ephemerals), gives new keys and new SPIs: (key, nonce) never repeats,
// and after a crash no (SPI, sequence) pair comes back.
//
// A hot takeover hands an SA's keys to another process while the first
// still uses them: the successor's outbound SA continues far beyond the
// first's sequence numbers (SA.SkipTo), and its inbound SA waits (Pause)
// until it gets the replay window the first ended with (ReplayWindow,
// Resume), or refuses everything (Refuse).
//
// # Threat model
//
// What it stops: a host on the underlay (or the path) that forges a
// member's source address, reads, modifies, or replays datagrams between
// members: forged, flipped and replayed datagrams fail authentication or
// the replay window and are dropped, counted, before anything is learned or
// written to a TAP; what it reads is ciphertext; a member's plaintext VXLAN
// is refused. Nor does dropping gossip between members (TCP and UDP 7946)
// make them talk plain: a member's address stays in the Table (Keyed)
// when gossip loses it. A later theft of static keys does not open recorded traffic
// (the ephemerals are gone).
//
// What it cannot stop: a holder of the gossip key, who can publish another
// static or ephemeral key for a member (identities are only as good as the
// gossip that pins them); traffic analysis (sizes, timing, who talks to
// whom: the outer addresses and ports stay); a member host's root; and
// kernel or hardware VTEPs (--peer, --allow-vtep), which speak plain
// RFC 7348 and get no protection.
package esp
