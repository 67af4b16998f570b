package perf

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"
)

func TestZZSim(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ZZS"))
	if n == 0 {
		t.Skip()
	}
	if os.Getenv("ZZHEAP") != "" {
		go func() {
			for i := 0; ; i++ {
				time.Sleep(3 * time.Minute)
				f, _ := os.Create(fmt.Sprintf("/tmp/prof/simheap%d.pprof", i))
				pprof.Lookup("heap").WriteTo(f, 0)
				f.Close()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				println("heap profile", i, "heapinuse MB", ms.HeapInuse>>20, "numgc", ms.NumGC, "gccpu", ms.GCCPUFraction)
			}
		}()
	}
	ne, _ := strconv.Atoi(os.Getenv("ZZE"))
	rep, err := SimulateGossip(t, GossipConfig{Nodes: n, NodeEndpoints: ne, Announces: 3, Kills: 2, Steady: 10e9, Progress: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("form %.2f cold %.2f ann %+v death %+v steady %+v mem %+v wall %.1f", rep.FormSeconds, rep.ColdStart.Seconds, rep.Announce99, rep.Death, rep.Steady, rep.Memory, rep.WallSeconds)
}
