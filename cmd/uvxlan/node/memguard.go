package node

// The Go heap while inbound gossip streams arrive.
//
// gossip bounds the inbound streams in number, bytes and time (gossip's
// stream.go), but what memberlist allocates for the bytes it reads becomes
// garbage the runtime collects at its own pace: GOGC lets the heap grow to
// twice what the last collection found live, what is allocated while a
// collection marks counts as live, and freed pages wait for the
// scavenger. Fake push/pulls at the byte bound, sent as fast as two hosts
// could (TestGossipStreams in cmd/uvxlan), made 30 to 60 collections a
// second and took the agent to 95 to 102 MiB of RSS on the shared test
// machine, 91 to 118 MiB beside one to three CPU hogs and 142 MiB once in
// a full run of the tests: at the peaks 28 to 80 MiB of heap objects, most
// of them garbage (the last collection had found 18 to 42 MiB live), and
// 3 to 51 MiB of free pages not yet returned (the larger part beside two
// hogs); the rest, about 16 MiB, is the binary and the runtime.
//
// So while streams arrive the agent sets the runtime a soft memory limit
// (debug.SetMemoryLimit), which the collector and the scavenger then hold
// however busy the CPU: what the runtime held apart from the heap, plus
// the larger of GOGC's heap goal when the first stream came and the live
// heap now (its smallest over the last guardWindow ticks, so that the
// streams' garbage counted live does not lift it), plus guardAllowance for
// what the streams may make memberlist hold (their bytes twice in its
// doubling buffer, once decrypted). It is derived again every guardTick,
// so a heap that grows legitimately meanwhile (a cold start of many joins)
// keeps guardAllowance of room above its live part and the collector never
// runs without pause; a heap that stays as it was never meets the limit.
// guardHold after the last stream the limit is what it was: none, or
// GOMEMLIMIT's if the user set one (a lower one is kept; with GOGC=off the
// guard does nothing). The same attack then left the agent at 71 to 72
// MiB alone, 72 to 80 MiB beside one or two hogs and 72 to 93 MiB beside
// three (14 runs of 16 under 80 MiB); the runtime held 55 to 63 MiB under
// a limit of 51 to 55, free pages returned. What it costs: during the
// attack (6.5 s) the agent used 5.5 to 5.7 s of CPU against 4.5 to 4.8 s
// without the guard on the shared machine (about 0.15 of a CPU more; 1.5
// to 1.7 s per GB the attackers wrote, against 1.1 to 1.25), and 2.9 to
// 3.1 s against 2.9 to 3.0 s beside two hogs: returned pages are faulted
// in again by the next stream. Nothing of it touches the forwarding path,
// which allocates nothing; the guard itself is a runtime/metrics read per
// guardTick while streams arrive, and the runtime caps what the limit's
// collections may take at half the CPU.

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sync/atomic"
	"time"

	"github.com/uvxlan/uvxlan/gossip"
)

const (
	guardTick      = 250 * time.Millisecond
	guardHold      = 10 * time.Second
	guardWindow    = 4 // ticks whose smallest live heap is taken
	guardAllowance = 4 * gossip.DefaultMaxStreamBytes
)

// heapGuard is the process's: the memory limit is the runtime's, shared by
// every node of a process.
var heapGuard memGuard

// memGuard holds the Go heap to a soft limit while inbound gossip streams
// arrive. Safe for concurrent use.
type memGuard struct {
	last    atomic.Int64 // unix nanoseconds of the last stream
	running atomic.Bool  // hold is running
	logged  atomic.Bool  // the first hold was logged at Info
	log     atomic.Pointer[slog.Logger]
	quiet   time.Duration // guardHold, or a test's
}

// streamArrived is gossip's Config.InboundStream: it starts holding the
// heap, or prolongs the hold.
func (g *memGuard) streamArrived(log *slog.Logger) {
	g.last.Store(time.Now().UnixNano())
	if !g.running.Load() && g.running.CompareAndSwap(false, true) {
		g.log.Store(log)
		go g.hold()
	}
}

// guardMetrics are what the limit is derived from.
var guardMetrics = []string{
	"/gc/gogc:percent",
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/released:bytes",
}

// hold sets the limit every guardTick until guardHold has passed without
// a stream, then puts the limit back.
func (g *memGuard) hold() {
	s := make([]metrics.Sample, len(guardMetrics))
	for i, name := range guardMetrics {
		s[i].Name = name
	}
	quiet := cmp.Or(g.quiet, guardHold)
	tick := time.NewTicker(min(guardTick, quiet))
	defer tick.Stop()
	for {
		prev := debug.SetMemoryLimit(-1) // GOMEMLIMIT's, or none
		metrics.Read(s)
		gogc := int64(-1) // GOGC=off: the user's limit governs
		if s[0].Value.Kind() == metrics.KindUint64 {
			gogc = int64(s[0].Value.Uint64())
		}
		var lives []uint64 // the last guardWindow live heaps
		var goal0 int64    // GOGC's heap goal when the hold began
		set := int64(math.MaxInt64)
		for i := 0; ; i++ {
			if gogc >= 0 {
				metrics.Read(s)
				live := s[1].Value.Uint64()
				if i == 0 {
					goal0 = int64(live) * (100 + gogc) / 100
				}
				if lives = append(lives, live); len(lives) > guardWindow {
					lives = lives[1:]
				}
				heap := s[3].Value.Uint64() + s[4].Value.Uint64() + s[5].Value.Uint64() + s[6].Value.Uint64()
				other := int64(s[2].Value.Uint64() - heap)
				limit := other + max(goal0, int64(slices.Min(lives))) + guardAllowance
				if limit = min(limit, prev); limit != set {
					debug.SetMemoryLimit(limit)
					if set == math.MaxInt64 {
						g.logHold(limit, live)
					}
					set = limit
				}
			}
			if time.Since(time.Unix(0, g.last.Load())) > quiet {
				break
			}
			<-tick.C
		}
		debug.SetMemoryLimit(prev)
		g.running.Store(false)
		// A stream that arrived after the check above saw us running.
		if time.Since(time.Unix(0, g.last.Load())) > quiet || !g.running.CompareAndSwap(false, true) {
			return
		}
	}
}

// logHold logs a hold: the process's first at Info, the others at Debug.
func (g *memGuard) logHold(limit int64, live uint64) {
	log := g.log.Load()
	if log == nil {
		return
	}
	lvl := slog.LevelDebug
	if g.logged.CompareAndSwap(false, true) {
		lvl = slog.LevelInfo
	}
	log.Log(context.Background(), lvl, "inbound gossip streams: holding the Go heap to a soft memory limit while they arrive",
		"limit_bytes", limit, "live_heap_bytes", live, "hold", cmp.Or(g.quiet, guardHold))
}
