// Command uvxlan-sim runs the simulation of `uvxlan bench gossip --mode
// sim` (perf.SimulateGossip) for the uvxlan binary, which starts it as a
// child: it reads a perf.GossipConfig as JSON on standard input, writes a
// perf.SimResult as JSON on standard output and its progress on standard
// error. It is a program of its own because the simulation's virtual clock
// is testing/synctest's bubble, which only a running test has: this
// program runs the simulation as the one test of testing.Main, so the
// agent binary, which runs as root, links no test code. A child of its own
// also gives the simulation, which holds every node's replica of every
// table, a heap of its own, returned when it exits.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"testing"
	"testing/synctest"

	"github.com/uvxlan/uvxlan/perf"
)

func main() {
	out := json.NewEncoder(os.Stdout)
	fail := func(err error) {
		out.Encode(perf.SimResult{Error: err.Error()})
		os.Exit(1)
	}
	var cfg perf.GossipConfig
	if err := json.NewDecoder(bufio.NewReader(os.Stdin)).Decode(&cfg); err != nil {
		fail(fmt.Errorf("bench gossip: the simulation's config on standard input: %w (uvxlan-sim is run by `uvxlan bench gossip --mode sim`)", err))
	}
	cfg.Progress = os.Stderr
	if os.Getenv("GOMEMLIMIT") == "" {
		// Every node's tables are in this process: let the collector work
		// harder as the heap nears what the machine has, rather than
		// double it.
		if avail := perf.MemAvailable(); avail > 0 {
			debug.SetMemoryLimit(avail * 9 / 10)
		}
	}
	os.Args = os.Args[:1] // testing.Main parses them
	testing.Main(func(string, string) (bool, error) { return true, nil },
		[]testing.InternalTest{{Name: "GossipSimulation", F: func(t *testing.T) {
			bubble := func(f func()) { synctest.Test(t, func(*testing.T) { f() }) }
			rep, err := perf.SimulateGossip(bubble, cfg)
			if err != nil {
				fail(err)
			}
			if out.Encode(perf.SimResult{Report: rep}) != nil {
				os.Exit(1)
			}
			os.Exit(0) // before testing prints PASS
		}}}, nil, nil)
}
