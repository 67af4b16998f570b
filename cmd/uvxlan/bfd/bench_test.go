package bfd

import (
	"context"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// BenchmarkHundredSessions runs one Manager with 100 sessions at 300 ms ×
// 3 against 100 peer Managers in the same process, in real time, and
// reports the process's CPU time per second of running (user + system,
// from getrusage): the agent's share is about half, the peers doing the
// same work. One iteration is one second: run it with -benchtime=10x for
// 10 s.
func BenchmarkHundredSessions(b *testing.B) {
	const n = 100
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFabric()
	agent := f.add(b, "10.0.0.1", Config{})
	var peers []*end
	for i := range n {
		p := f.add(b, netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)}).String(), Config{})
		p.record(false)
		peers = append(peers, p)
		if err := agent.m.Add(p.addr, [6]byte{}); err != nil {
			b.Fatal(err)
		}
		if err := p.m.Add(agent.addr, [6]byte{}); err != nil {
			b.Fatal(err)
		}
	}
	agent.record(false)
	for _, e := range append(peers, agent) {
		go e.m.Run(ctx)
	}
	allUp := func() bool {
		for _, s := range agent.m.Sessions() {
			if s.State != Up || s.TxInterval != 300*time.Millisecond {
				return false
			}
		}
		return true
	}
	wait.For(b, time.Minute, "100 sessions Up at 300 ms", allUp)
	tx0 := agent.m.Stats()["tx_packets"]
	cpu0 := cpuTime(b)
	start := time.Now()
	b.ResetTimer()
	for range b.N {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	elapsed := time.Since(start)
	cpu := cpuTime(b) - cpu0
	if !allUp() {
		b.Errorf("not all sessions Up after %v: %+v", elapsed, agent.m.Stats())
	}
	if st := agent.m.Stats(); st["down"] != 0 {
		b.Errorf("%d sessions went down while running", st["down"])
	}
	b.ReportMetric(float64(cpu)/float64(time.Millisecond)/elapsed.Seconds(), "cpu-ms/s")
	b.ReportMetric(float64(agent.m.Stats()["tx_packets"]-tx0)/elapsed.Seconds(), "agent-pkts/s")
	b.Logf("%d sessions, %v: %v CPU (user+sys, agent and peers), agent sent %d packets", n, elapsed.Round(time.Millisecond), cpu, agent.m.Stats()["tx_packets"]-tx0)
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
