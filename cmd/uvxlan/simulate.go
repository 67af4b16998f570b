package main

// bench gossip --mode sim: the simulation (perf.SimulateGossip) runs in a
// synctest bubble, which only a running test has, so it runs in the helper
// program uvxlan-sim (cmd/uvxlan-sim), started as a child: this binary,
// the agent that runs as root, links no test code. The parent writes the
// config to the child's stdin as JSON and reads a perf.SimResult from its
// stdout; the child's stderr is the progress.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/uvxlan/uvxlan/perf"
)

// simProgram is the helper program's name; simPath says where it is looked
// for.
const simProgram = "uvxlan-sim"

// simPath returns the path of uvxlan-sim: beside this executable (make
// build puts both in bin/), or else on PATH.
func simPath() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), simProgram)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath(simProgram); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("bench gossip: --mode sim runs in the program %s, found neither beside this executable nor on PATH: build it with `make build` (bin/%s) or `go build -o DIR ./cmd/%s` into this executable's directory", simProgram, simProgram, simProgram)
}

// runGossipSim runs the simulation of cfg in a child process and returns
// its report. Canceling ctx kills the child.
func runGossipSim(ctx context.Context, cfg perf.GossipConfig, progress io.Writer) (*perf.GossipReport, error) {
	sim, err := simPath()
	if err != nil {
		return nil, err
	}
	in, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, sim)
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout = &out
	cmd.Stderr = io.MultiWriter(progress, &tail{buf: &errOut})
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	var res perf.SimResult
	if err := json.NewDecoder(&out).Decode(&res); err != nil || (res.Report == nil && res.Error == "") {
		return nil, fmt.Errorf("bench gossip: the simulation (%s) failed (%v); its last output:\n%s", sim, runErr, strings.TrimSpace(errOut.String()))
	}
	if res.Error != "" {
		return nil, errors.New(res.Error)
	}
	return res.Report, nil
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
