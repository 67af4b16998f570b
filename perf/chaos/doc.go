// Package chaos checks that a cluster of real uvxlan agents stays correct
// under faults: it is `uvxlan bench chaos`. Where package perf measures
// speed, chaos measures correctness: every table entry accounted for, every
// fault's outage against its promise.
//
// Run builds a testbed of Config.Hosts hosts with testenv (198.18.0.0/24),
// each with a bridge holding its agent's TAP and Endpoints endpoint
// namespaces, sends a mesh of numbered UDP probes between every pair of
// endpoints (mesh.go), and runs a schedule of faults drawn from
// Config.Seed (schedule.go: kill -9, SIGTERM, takeover, SIGHUP, partition,
// loss, an endpoint moved or vanished), never two on one host at once. It
// starts, stops, takes over and reads the agents (agent.go) as a user would:
// the binary with its flags, the control socket (through
// cmd/uvxlan/controlapi's Client) and the metrics; it never imports the
// agent. The truth (truth.go) is where the bench put every MAC
// and address; the lossy underlay holds packets in this process
// (nfqueue.go). The Report
// (report.go) holds per fault kind the longest gaps between probes of the
// pairs it touched beside its promise (Promises), the probes lost by pairs
// no fault touched, how long until every agent's tables equal the truth,
// and the agents' memory, goroutines and unexplained counters; it encodes
// as JSON and renders as a table with a verdict per check.
//
// Run needs root, blocks for about Config.Duration plus setup and
// settling, and removes everything it built before it returns, also when
// its context is canceled. Schedule and ParseFaultKinds are pure and safe
// for concurrent use; a Report is plain data.
package chaos
