package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// tapState is what `ip -o addr show dev` and `ip -o link show dev` say of a
// TAP in h: whether it exists, its addresses and its master.
func tapState(t *testing.T, h *testenv.Host, dev string) (exists bool, addrs, link string) {
	t.Helper()
	out, err := h.Run(context.Background(), "ip", "-o", "link", "show", "dev", dev)
	if err != nil {
		return false, "", out
	}
	a, err := h.Run(context.Background(), "ip", "-o", "addr", "show", "dev", dev)
	if err != nil {
		t.Fatalf("%s: ip addr show %s: %v\n%s", h.Name, dev, err, a)
	}
	return true, a, out
}

// The TAPs the agent creates outlive a crash with their addresses and bridge
// membership, and the next start attaches to them; a clean stop removes them
// unless --keep-tap; a TAP made by someone else is never removed.
func TestTAPOutlivesTheProcess(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	peer := func(h *testenv.Host) []string { return []string{"--peer", h.Underlay.String()} }

	t.Run("clean stop removes the TAP", func(t *testing.T) {
		a := startAgent(t, h1, peer(h2)...)
		if ok, _, link := tapState(t, h1, "uvx0"); !ok || !strings.Contains(link, "alias uvxlan") {
			t.Fatalf("the created TAP is not marked as uvxlan's: %s", link)
		}
		if err := a.proc.Stop(); err != nil {
			t.Fatal(err)
		}
		if ok, _, link := tapState(t, h1, "uvx0"); ok {
			t.Fatalf("uvx0 still exists after a clean stop: %s", link)
		}
	})

	t.Run("--keep-tap keeps it, the next start attaches and a clean stop removes it", func(t *testing.T) {
		a := startAgent(t, h1, append(peer(h2), "--keep-tap")...)
		if err := a.proc.Stop(); err != nil {
			t.Fatal(err)
		}
		ok, addrs, _ := tapState(t, h1, "uvx0")
		if !ok || !strings.Contains(addrs, "10.42.0.1/24") {
			t.Fatalf("with --keep-tap, uvx0 is gone or lost its address: %v %s", ok, addrs)
		}
		a = startAgent(t, h1, peer(h2)...)
		if !strings.Contains(a.proc.Log(), "attached to the TAP a previous run left") {
			t.Errorf("the second start did not attach:\n%s", a.proc.Log())
		}
		if err := a.proc.Stop(); err != nil {
			t.Fatal(err)
		}
		if ok, _, link := tapState(t, h1, "uvx0"); ok {
			t.Fatalf("uvx0 still exists after a clean stop without --keep-tap: %s", link)
		}
	})

	t.Run("a TAP made by someone else is attached and left", func(t *testing.T) {
		if out, err := h1.Run(context.Background(), "ip", "tuntap", "add", "dev", "uvx0", "mode", "tap", "multi_queue", "vnet_hdr"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Cleanup(func() { h1.Run(context.Background(), "ip", "link", "del", "uvx0") })
		a := startAgent(t, h1, peer(h2)...)
		if err := a.proc.Stop(); err != nil {
			t.Fatal(err)
		}
		if ok, _, _ := tapState(t, h1, "uvx0"); !ok {
			t.Fatal("the agent removed a TAP it did not create")
		}
	})

	t.Run("kill -9 leaves the TAP on its bridge and the endpoint recovers", func(t *testing.T) {
		a1 := startAgent(t, h1, peer(h2)...)
		a2 := startAgent(t, h2, peer(h1)...)
		defer a2.proc.Stop()
		epNS := tb.Prefix() + "-rep"
		if out, err := exec.Command("ip", "netns", "add", epNS).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		t.Cleanup(func() { exec.Command("ip", "netns", "del", epNS).Run() })
		for _, args := range [][]string{
			{"link", "add", "brx", "type", "bridge"},
			{"link", "set", "uvx0", "master", "brx"},
			{"link", "add", "ep0", "type", "veth", "peer", "name", "ep1", "netns", epNS},
			{"link", "set", "ep0", "master", "brx"},
			{"link", "set", "brx", "up"},
			{"link", "set", "ep0", "up"},
		} {
			if out, err := h1.Run(context.Background(), "ip", args...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		}
		inEP := func(args ...string) (string, error) {
			out, err := exec.Command("ip", append([]string{"netns", "exec", epNS}, args...)...).CombinedOutput()
			return string(out), err
		}
		for _, args := range [][]string{{"ip", "addr", "add", "10.42.0.51/24", "dev", "ep1"}, {"ip", "link", "set", "ep1", "up"}} {
			if out, err := inEP(args...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		}
		reach := func(within time.Duration) (time.Duration, error) {
			start := time.Now()
			err := wait.Until(context.Background(), within, func() bool {
				_, err := inEP("ping", "-c", "1", "-W", "0.2", a2.overlay.String())
				return err == nil
			})
			return time.Since(start), err
		}
		if _, err := reach(10 * time.Second); err != nil {
			t.Fatalf("the endpoint cannot reach h2 before the crash: %v", err)
		}

		if err := a1.proc.Kill(); err != nil {
			t.Fatal(err)
		}
		ok, addrs, link := tapState(t, h1, "uvx0")
		if !ok || !strings.Contains(link, "master brx") || !strings.Contains(addrs, "10.42.0.1/24") {
			t.Fatalf("after kill -9, uvx0 is gone or lost its bridge or address:\n%s\n%s", link, addrs)
		}
		started := time.Now()
		a1 = startAgent(t, h1, peer(h2)...)
		defer a1.proc.Stop()
		took, err := reach(10 * time.Second)
		if err != nil {
			t.Fatalf("the endpoint does not reach h2 after the restart: %v\n%s", err, a1.proc.Log())
		}
		t.Logf("endpoint ping recovered %v after the restart began (%v after the control socket answered)",
			time.Since(started).Round(time.Millisecond), took.Round(time.Millisecond))
		if _, _, link := tapState(t, h1, "uvx0"); !strings.Contains(link, "master brx") {
			t.Errorf("after the restart uvx0 left the bridge: %s", link)
		}
	})
}

// `uvxlan status` shows an agent at a glance, as a table and as JSON.
func TestStatusCommand(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	a1 := startAgent(t, h1)
	startAgent(t, h2, "--join", h1.Underlay.String())
	if err := waitForMembers(context.Background(), a1.control, 2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	var st node.Status
	if err := json.Unmarshal([]byte(runCLI(t, "status", "--json", "--control", a1.control)), &st); err != nil {
		t.Fatal(err)
	}
	if st.Name != h1.Name || st.MembersAlive != 2 || st.MembersTotal != 2 || st.FDB[fdb.OriginLocal] != 1 ||
		st.FDB[fdb.OriginGossip] != 1 || st.Uptime <= 0 || st.Version == "" || len(st.Segments) != 1 ||
		st.Segments[0].Dev != "uvx0" || st.Segments[0].MAC != a1.mac {
		t.Errorf("status --json: %+v", st)
	}
	table := runCLI(t, "status", "--control", a1.control)
	for _, want := range []string{"name", h1.Name, "members", "2 alive of 2", "fdb", "1 local, 1 gossip", "vni 1", "uvx0 " + a1.mac.String()} {
		if !strings.Contains(table, want) {
			t.Errorf("status lacks %q:\n%s", want, table)
		}
	}
}

// After kill -9, the restarted agent serves again at once, and its peers
// never withdraw its entries in between: the TAP MAC stays in h2's FDB,
// and its address in h2's neighbour table, at every poll (every 50 ms).
func TestCrashRestartKeepsEntries(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 2})
	h1, h2 := tb.Host(1), tb.Host(2)
	a1 := startAgent(t, h1)
	a2 := startAgent(t, h2, "--join", h1.Underlay.String())
	if err := waitForMembers(context.Background(), a2.control, 2, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// holds runs in the polling goroutine too: it reads only these
	// copies (a1 is replaced by the restart), and a failed read counts as
	// a gap.
	mac1, ip1 := a1.mac, a1.overlay
	holds := func() (bool, bool) {
		var mac, ip bool
		rows, _, err := newControlClient(a2.control).fdb()
		if err != nil {
			return false, false
		}
		for _, r := range rows {
			mac = mac || r.MAC == mac1 && r.Origin == fdb.OriginGossip
		}
		ns, _, err := newControlClient(a2.control).neigh()
		if err != nil {
			return false, false
		}
		for _, n := range ns {
			ip = ip || n.IP == ip1 && n.MAC == mac1
		}
		return mac, ip
	}
	wait.For(t, 10*time.Second, "h2 holds h1's entries", func() bool { m, i := holds(); return m && i })

	stop := make(chan struct{})
	gaps := make(chan string, 1000)
	polled := make(chan int, 1)
	go func() {
		n := 0
		defer func() { polled <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			n++
			if m, i := holds(); !m || !i {
				gaps <- fmt.Sprintf("%s: mac %v, ip %v", time.Now().Format("15:04:05.000"), m, i)
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	if err := a1.proc.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a1 = startAgent(t, h1)
	served := time.Since(start)
	if err := wait.Until(context.Background(), 10*time.Second, func() bool {
		_, err := h2.Ping(context.Background(), a1.overlay, 1)
		return err == nil
	}); err != nil {
		t.Fatalf("h2 does not reach h1 after the restart: %v", err)
	}
	pinged := time.Since(start)
	time.Sleep(8 * time.Second) // past memberlist's suspicion timeout
	close(stop)
	n := <-polled
	close(gaps)
	var missing []string
	for g := range gaps {
		missing = append(missing, g)
	}
	t.Logf("restarted agent answered its control socket %v after its start, h2 pinged it %v after; %d polls", served.Round(time.Millisecond), pinged.Round(time.Millisecond), n)
	if len(missing) > 0 {
		t.Errorf("h2 lacked h1's entries at %d of %d polls:\n%s\n%s", len(missing), n, strings.Join(missing, "\n"), a2.proc.Log())
	}
}
