package main

// Node names in namespace testbeds: the README's "cluster by hand" example,
// whose hosts share the hostname, and a duplicate --name refused without
// disturbing the node that has it.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv"
	"github.com/uvxlan/uvxlan/testenv/wait"
)

// readmeByHand returns the commands of README.md's "cluster by hand"
// example: the shell block after "To try it on one machine", one command a
// line, comments dropped.
func readmeByHand(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "To try it on one machine")
	if !ok {
		t.Fatal(`README.md: no "To try it on one machine" section`)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("README.md: no sh block after \"To try it on one machine\"")
	}
	var cmds []string
	sc := bufio.NewScanner(strings.NewReader(block))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" {
			cmds = append(cmds, line)
		}
	}
	return cmds
}

// The README's "cluster by hand" example, run as written: the testbed CLI,
// two agents started without --name (the namespaces share the hostname), a
// ping, fdb show, members, testbed down. Only the binary's path, the
// testbed's prefix (--prefix, to stay clear of others' "uvx" testbed) and
// the control sockets' directory differ.
func TestReadmeClusterByHand(t *testing.T) {
	testenv.Require(t)
	prefix, dir := testenv.PrefixForTest(t), t.TempDir() // its cleanup kills the agents too
	var agents []*exec.Cmd
	var logs []string
	t.Cleanup(func() {
		for i, cmd := range agents {
			_ = cmd.Process.Kill() // `testbed exec`; the agent itself went with its namespace
			_ = cmd.Wait()
			if t.Failed() {
				b, _ := os.ReadFile(logs[i])
				t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), b)
			}
		}
	})

	var controls []string
	for _, line := range readmeByHand(t) {
		args := strings.Fields(strings.TrimSuffix(line, "&"))
		background := strings.HasSuffix(line, "&")
		if slices.Equal(args, []string{"make", "build"}) {
			continue // TestMain built the binary
		}
		if args[0] == "sleep" {
			continue // the pause for the agents to start: this test waits for them itself
		}
		if args[0] != "bin/uvxlan" {
			t.Fatalf("README command %q: not bin/uvxlan", line)
		}
		if len(args) == 4 && args[1] == "keygen" && args[2] == ">" { // the shell's redirection, done here
			out, err := exec.Command(uvxlanBin, "keygen").Output()
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			if err := os.WriteFile(filepath.Join(dir, args[3]), out, 0o600); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for i, a := range args {
			switch {
			case a == "bin/uvxlan":
				args[i] = uvxlanBin
			case strings.HasPrefix(a, "/run/uvxlan/"):
				args[i] = filepath.Join(dir, strings.TrimPrefix(a, "/run/uvxlan/"))
			case i > 0 && args[i-1] == "--gossip-key-file":
				args[i] = filepath.Join(dir, a) // keygen wrote it there
			}
			if i > 0 && args[i-1] == "--control" {
				controls = append(controls, args[i])
			}
		}
		if slices.Contains(args, "--name") {
			t.Errorf("README command %q names the node: the example is about the default name", line)
		}
		if args[1] == "testbed" {
			args = slices.Insert(args, 3, "--prefix", prefix)
		}
		cmd := exec.Command(args[0], args[1:]...)
		if background {
			logs = append(logs, filepath.Join(dir, fmt.Sprintf("agent%d.log", len(agents)+1)))
			f, err := os.Create(logs[len(logs)-1])
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout, cmd.Stderr, cmd.WaitDelay = f, f, 5*time.Second
			err = cmd.Start()
			f.Close()
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			agents = append(agents, cmd)
			if err := waitForSocket(context.Background(), controls[len(controls)-1]); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			continue
		}
		if slices.Contains(args, "ping") {
			// A person types it when the agents are up; the join may
			// take a moment more.
			var out []byte
			var err error
			if werr := wait.Until(context.Background(), 20*time.Second, func() bool {
				out, err = exec.Command(args[0], args[1:]...).CombinedOutput()
				return err == nil
			}); werr != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
			t.Logf("%s:\n%s", line, out)
			// The other direction too: every pair pings.
			back := exec.Command(uvxlanBin, "testbed", "exec", "--prefix", prefix, "h2", "--", "ping", "-c", "3", "10.42.0.1")
			if out, err := back.CombinedOutput(); err != nil {
				t.Fatalf("h2 ping 10.42.0.1: %v\n%s", err, out)
			}
			continue
		}
		if args[1] == "members" {
			checkByHandMembers(t, controls)
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		t.Logf("%s:\n%s", line, out)
	}
	if len(agents) != 2 {
		t.Fatalf("the README started %d agents, want 2", len(agents))
	}
	for i := range agents {
		b, _ := os.ReadFile(logs[i])
		for _, bad := range []string{"Conflicting address", "name already taken"} {
			if strings.Contains(string(b), bad) {
				t.Errorf("agent %d logged %q:\n%s", i+1, bad, b)
			}
		}
	}
}

// checkByHandMembers checks that both agents of the README example see
// both, alive, under distinct default names: the hostname and --local.
func checkByHandMembers(t *testing.T, controls []string) {
	t.Helper()
	hostname, _ := os.Hostname()
	want := []string{
		defaultName(hostname, netip.MustParseAddr("198.18.0.1")),
		defaultName(hostname, netip.MustParseAddr("198.18.0.2")),
	}
	for _, control := range controls {
		var got []string
		err := wait.Until(context.Background(), 20*time.Second, func() bool {
			ms, _, err := newControlClient(control).members()
			got = got[:0]
			for _, m := range ms {
				if m.State == "alive" {
					got = append(got, m.Name)
				}
			}
			slices.Sort(got)
			return err == nil && slices.Equal(got, want)
		})
		if err != nil {
			t.Errorf("%s: alive members %q, want %q", control, got, want)
		}
	}
}

// A node started under the --name of a live member exits 1 naming the
// conflict and the member's address, whether it joins through that member
// or through another one; the member keeps its lease (routed mode), its
// membership and its reachability.
func TestDuplicateNameRefused(t *testing.T) {
	t.Parallel()
	tb := testenv.NewForTest(t, testenv.Config{Hosts: 3})
	dir := t.TempDir()
	h1, h2, h3 := tb.Host(1), tb.Host(2), tb.Host(3)
	a1 := startRouted(t, h1, dir)
	a2 := startRouted(t, h2, dir, "--join", h1.Underlay.String())
	s1, s2 := a1.bridge(t).Masked(), a2.bridge(t).Masked()
	lease1 := aliveLease(t, a1, s1, "h1")
	aliveLease(t, a2, s1, "h1")
	pingTAP(t, h2, s1.Addr())
	pingTAP(t, h1, s2.Addr())

	holder := netip.AddrPortFrom(h1.Underlay, 7946).String()
	for _, via := range []*testenv.Host{h2, h1} {
		t.Run("joining via "+via.Name, func(t *testing.T) {
			args, _, _ := routedArgs(h3, t.TempDir(), "--join", via.Underlay.String())
			args[slices.Index(args, "--name")+1] = "h1"
			p, err := h3.Start(context.Background(), "", uvxlanBin, args...)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Kill() // if it was not refused
			select {
			case <-p.Done():
			case <-time.After(30 * time.Second):
				t.Fatalf("the duplicate h1 on h3 still runs after 30s:\n%s", p.Log())
			}
			err = p.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("the duplicate exited with %v, want status 1:\n%s", err, p.Log())
			}
			log := p.Log()
			for _, want := range []string{"uvxlan: ", "node name already taken", `"h1"`, holder} {
				if !strings.Contains(log, want) {
					t.Errorf("the duplicate's output lacks %q:\n%s", want, log)
				}
			}
		})
	}

	// Time for gossip to go around: a duplicate that got in would show now.
	time.Sleep(3 * time.Second)
	if a1.proc.Exited() {
		t.Fatalf("h1's agent exited:\n%s", a1.proc.Log())
	}
	if l := aliveLease(t, a1, s1, "h1"); !l.Claimed.Equal(lease1.Claimed) || l.VTEP != lease1.VTEP {
		t.Errorf("h1's lease is now %+v, was %+v", l, lease1)
	}
	aliveLease(t, a2, s1, "h1")
	for _, a := range []*routedAgent{a1, a2} {
		ms, _, err := newControlClient(a.control).members()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if m.Name == "h1" && (m.State != "alive" || m.Addr.String() != holder) {
				t.Errorf("%s sees h1 as %+v, want alive at %s", a.host.Name, m, holder)
			}
			if m.Addr.Addr() == h3.Underlay {
				t.Errorf("%s lists the duplicate: %+v", a.host.Name, m)
			}
		}
	}
	pingTAP(t, h2, s1.Addr())
	pingTAP(t, h1, s2.Addr())
	for _, bad := range []string{"Refuting", "Conflicting address", "lease lost"} {
		if log := a1.proc.Log(); strings.Contains(log, bad) {
			t.Errorf("h1's agent logged %q:\n%s", bad, log)
		}
	}
}

// aliveLease waits until a's `uvxlan leases --json` shows subnet alive,
// leased by node, and returns it.
func aliveLease(t *testing.T, a *routedAgent, subnet netip.Prefix, node string) leaseJSON {
	t.Helper()
	var got []leaseJSON
	var l leaseJSON
	err := wait.Until(context.Background(), 20*time.Second, func() bool {
		got = got[:0]
		if err := json.Unmarshal([]byte(runCLI(t, "leases", "--json", "--control", a.control)), &got); err != nil {
			t.Fatal(err)
		}
		for _, l = range got {
			if l.Subnet == subnet && l.Node == node && l.State == "alive" {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("%s: leases %+v, want %s alive for %s", a.host.Name, got, subnet, node)
	}
	return l
}

// leaseJSON is a row of `uvxlan leases --json`.
type leaseJSON struct {
	Subnet  netip.Prefix   `json:"subnet"`
	Node    string         `json:"node"`
	VTEP    netip.AddrPort `json:"vtep"`
	State   string         `json:"state"`
	Claimed time.Time      `json:"claimed"`
}

// pingTAP pings a routed node's TAP address (its subnet's first address) from
// host h, through the overlay.
func pingTAP(t *testing.T, h *testenv.Host, dst netip.Addr) {
	t.Helper()
	var err error
	if werr := wait.Until(context.Background(), 20*time.Second, func() bool {
		_, err = h.Ping(context.Background(), dst, 3)
		return err == nil
	}); werr != nil {
		t.Fatalf("%s cannot ping %s: %v", h.Name, dst, err)
	}
}
