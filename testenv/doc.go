// Package testenv builds network-namespace testbeds: an underlay bridge, hosts, agents, kernel VXLAN peers, and their teardown.
//
// A testbed with prefix P and N hosts is, once Up:
//
//	namespace P-ul   bridge br0 (up), with one port per host named h1 … hN
//	namespace P-hI   lo (up), and ul0: the other end of the veth hI, carrying
//	                 the underlay address Underlay+I (198.18.0.I/24 by default)
//
// Nothing is created in the root namespace: the veth pairs are made inside the
// underlay namespace and one end is moved straight into its host. Underlay
// addresses must come from 198.18.0.0/15 (RFC 2544, set aside for benchmarking).
//
// A host may also hold endpoint namespaces (AddEndpoint, "P-hI-NAME", a veth
// from a bridge of the host), kernel EVPN VTEPs (AddEVPNVTEP) and FRR's zebra
// and bgpd (StartFRR: configurations and sockets in the testbed's RunDir,
// routes and sessions read back as JSON with EVPNRoutes and Neighbors). A
// raw BGP speaker (OpenBGP, SendMalformedEVPN) sends EVPN UPDATEs of chosen
// bytes, malformed ones included, and reports what the peer did.
//
// The package drives iproute2, ping, tcpdump, FRR and the uvxlan binary as
// subprocesses; it imports no other package of the project but its own wait,
// the one way the project's tests and harnesses wait for a condition
// (wait.Until; wait.For in tests). Every command it runs is bounded by a
// context with a timeout. Tests get a testbed from
// NewForTest, which skips (or fails, under UVXLAN_REQUIRE_NETNS=1) when the
// machine cannot build one and tears it down in t.Cleanup. A crashed run's
// leftovers go with Cleanup(prefix).
package testenv
