// Package encap implements the VXLAN header codec (RFC 7348), the batched UDP
// transport (recvmmsg/sendmmsg) and the forwarding engine that moves frames
// between a TAP device and the underlay.
package encap
