// Package encap implements the VXLAN header codec (RFC 7348), the batched UDP
// transport (recvmmsg/sendmmsg), the forwarding engine that moves frames
// between a TAP device and the underlay, and the frames the engine writes
// into the TAP itself (ARP and ND answers and probes, ICMP too-big errors),
// and the path MTU probes exchanged between agents (pmtu.go). It leaves
// inner checksums partial for the members that take them (partial.go). The engine
// seals and opens the datagrams of members that encrypt (--encrypt) with the
// SAs of package encap/esp, which holds the wire format and its threat model.
package encap
