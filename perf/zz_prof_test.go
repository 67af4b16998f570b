package perf

import (
	"context"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
)

type profWriter struct{ done bool }

func (w *profWriter) Write(p []byte) (int, error) {
	os.Stderr.Write(p)
	if !w.done && strings.Contains(string(p), "memory:") {
		w.done = true
		f, _ := os.Create("/tmp/prof/heap.pprof")
		pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
	}
	return len(p), nil
}

func TestZZProf(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ZZN"))
	if n == 0 {
		t.Skip()
	}
	rep, err := RunGossip(context.Background(), GossipConfig{Nodes: n, Mode: "memory", Announces: 1, Kills: 1, Steady: 1e9, Progress: &profWriter{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", rep.Memory)
}
