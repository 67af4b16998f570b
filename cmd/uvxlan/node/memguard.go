package node

// The Go heap while inbound gossip streams arrive.
//
// gossip bounds the inbound streams in number, bytes and time (gossip's
// stream.go), but what memberlist allocates for the bytes it reads becomes
// garbage the runtime collects at its own pace: GOGC lets the heap grow to
// twice what the last collection found live, and what is allocated while a
// collection marks counts as live. Streams of fake push/pulls at the byte
// bound, sent as fast as two hosts could, made 50 collections a second;
// on a quiet machine the agent peaked at 91 to 104 MiB of RSS, but with two
// CPU hogs beside it the marking took longer, more of the garbage counted
// as live, and the heap goal followed: 108 to 142 MiB, of which 15 to 35
// MiB were pages freed but not yet returned to the kernel.
//
// So while streams arrive the agent sets the runtime a soft memory limit
// (debug.SetMemoryLimit) that the GC and the scavenger then hold whatever
// the CPU: what the runtime held apart from the heap, plus the heap goal
// GOGC gives the live heap (its smallest over the last second, so that the
// attack's garbage does not lift it), plus guardAllowance for what the
// streams may make memberlist hold (a stream's bytes twice in its doubling
// buffer, once decrypted). It is derived again every guardTick, so a heap
// that grows legitimately meanwhile (a cold start of many joins) raises it
// with it and the GC never has to run without pause; guardHold after the
// last stream, the limit is what it was (GOGC alone, or GOMEMLIMIT if the
// user set one: a lower one is kept, and with GOGC=off the guard does
// nothing). Nothing of it touches the forwarding path, which allocates
// nothing; the guard costs a metrics read per tick while streams arrive,
// and the collections the limit asks for, which the runtime caps at half
// the CPU.

import (
	"cmp"
	"context"
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
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
		var lives [guardWindow]uint64
		var goal0 int64 // GOGC's heap goal when the hold began
		set := int64(math.MaxInt64)
		for i := 0; ; i++ {
			if gogc >= 0 {
				metrics.Read(s)
				live := s[1].Value.Uint64()
				if i == 0 {
					lives = [guardWindow]uint64{live, live, live, live}
					goal0 = int64(live) * (100 + gogc) / 100
				}
				lives[i%guardWindow] = live
				heap := s[3].Value.Uint64() + s[4].Value.Uint64() + s[5].Value.Uint64() + s[6].Value.Uint64()
				other := int64(s[2].Value.Uint64() - heap)
				limit := other + max(goal0, int64(min(lives[0], lives[1], lives[2], lives[3]))) + guardAllowance
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
		"limit_bytes", limit, "live_heap_bytes", live, "hold", guardHold)
}
