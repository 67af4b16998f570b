package main

// bench gossip --mode sim: the simulation (perf.SimulateGossip) runs in a
// synctest bubble, which only a running test has, so this binary runs it in
// a child of itself that is a test binary for the occasion: main sees
// simChildEnv and calls simChild, which hands one test to testing.Main.
// The parent writes the config to the child's stdin as JSON and reads the
// report, or the error, from its stdout (simResult); the child's stderr is
// the progress. A child of
// its own also gives the simulation, which holds every node's replica of
// every table, a heap of its own, returned when it exits.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/uvxlan/uvxlan/perf"
)

// simChildEnv marks the child: its value is simChildToken.
const (
	simChildEnv   = "UVXLAN_INTERNAL_GOSSIP_SIMULATION"
	simChildToken = "child-of-bench-gossip"
)

// isSimChild reports whether this process is the simulation's child.
func isSimChild() bool { return os.Getenv(simChildEnv) == simChildToken }

// runGossipSim runs the simulation of cfg in a child process and returns
// its report. Canceling ctx kills the child.
func runGossipSim(ctx context.Context, cfg perf.GossipConfig, progress io.Writer) (*perf.GossipReport, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench gossip: the simulation runs in a child of this executable: %w", err)
	}
	in, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), simChildEnv+"="+simChildToken)
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout = &out
	cmd.Stderr = io.MultiWriter(progress, &tail{buf: &errOut})
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	var res simResult
	if err := json.NewDecoder(&out).Decode(&res); err != nil || (res.Report == nil && res.Error == "") {
		return nil, fmt.Errorf("bench gossip: the simulation failed (%v); its last output:\n%s", runErr, strings.TrimSpace(errOut.String()))
	}
	if res.Error != "" {
		return nil, errors.New(res.Error)
	}
	return res.Report, nil
}

// simResult is what the child writes to its stdout: the report, or why
// there is none.
type simResult struct {
	Report *perf.GossipReport `json:"report,omitempty"`
	Error  string             `json:"error,omitempty"`
}

// tail keeps the last 4 KiB written to it.
type tail struct{ buf *bytes.Buffer }

func (t *tail) Write(p []byte) (int, error) {
	t.buf.Write(p)
	if n := t.buf.Len(); n > 4096 {
		t.buf.Next(n - 4096)
	}
	return len(p), nil
}

// simChild is the child's main: it reads the config, runs the simulation
// as the one test of testing.Main and writes the report. It does not
// return.
func simChild() {
	out := json.NewEncoder(os.Stdout)
	var cfg perf.GossipConfig
	if err := json.NewDecoder(bufio.NewReader(os.Stdin)).Decode(&cfg); err != nil {
		out.Encode(simResult{Error: fmt.Sprintf("bench gossip: the simulation's config: %v", err)})
		os.Exit(exitError)
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
			rep, err := perf.SimulateGossip(t, cfg)
			if err != nil {
				out.Encode(simResult{Error: err.Error()})
				os.Exit(exitError)
			}
			if out.Encode(simResult{Report: rep}) != nil {
				os.Exit(exitError)
			}
			os.Exit(exitOK) // before testing prints PASS
		}}}, nil, nil)
}
