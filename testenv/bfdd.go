// FRR's bfdd inside a host namespace, as a BFD peer.

package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// BFDD is FRR's bfdd running inside one host, with single-hop peers to one
// address at 300 ms × 3. Start, Kill and Proc are for one goroutine; Vtysh
// and Peer may be called from any.
type BFDD struct {
	Host *Host
	Dir  string // bfdd.conf, sockets: the vty socket directory
	Proc *Proc  // the running bfdd (the last one started)
	peer netip.Addr
}

// bfddStartTimeout bounds how long bfdd may take to answer vtysh.
const bfddStartTimeout = 30 * time.Second

// StartBFDD writes bfdd.conf into <RunDir>/<host name>-bfdd (owned by user
// frr) with a single-hop peer to peer at 300 ms × 3 (receive, transmit,
// multiplier) from each of locals (by default the host's underlay
// address), and starts bfdd in the host's namespace as Start does. ctx
// bounds the start only; bfdd runs until Kill, or the testbed's Down
// (NewForTest's teardown, also when the test failed), which also removes
// the directory. One BFDD per host.
func (h *Host) StartBFDD(ctx context.Context, peer netip.Addr, locals ...netip.Addr) (*BFDD, error) {
	fail := func(err error) (*BFDD, error) { return nil, fmt.Errorf("testenv: %s: bfdd: %w", h.Name, err) }
	if _, err := os.Stat(filepath.Join(FRRDir, "bfdd")); err != nil {
		return fail(fmt.Errorf("FRR's bfdd is not installed: %w", err))
	}
	if len(locals) == 0 {
		locals = []netip.Addr{h.Underlay}
	}
	run, err := h.tb.RunDir()
	if err != nil {
		return fail(err)
	}
	dir := filepath.Join(run, h.Name+"-bfdd")
	if err := makeFRRDir(dir); err != nil {
		return fail(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "log immediate-mode\nhostname %s-bfdd\nbfd\n", h.Name)
	for _, l := range locals {
		fmt.Fprintf(&b, " peer %s local-address %s\n  receive-interval 300\n  transmit-interval 300\n  detect-multiplier 3\n exit\n", peer, l)
	}
	b.WriteString("exit\n")
	if err := os.WriteFile(filepath.Join(dir, "bfdd.conf"), []byte(b.String()), 0o644); err != nil {
		return fail(err)
	}
	d := &BFDD{Host: h, Dir: dir, peer: peer}
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// Start starts bfdd in the foreground, logging to the testbed's log
// directory, and waits until `show bfd peers json` lists its peer:
//
//	bfdd -f DIR/bfdd.conf -i DIR/bfdd.pid -z DIR/zserv.api --vty_socket DIR --bfdctl DIR/bfdd.sock -P 0 -u frr -g frr --log stdout
//
// It restarts bfdd after Kill. ctx bounds the start only.
func (d *BFDD) Start(ctx context.Context) error {
	fail := func(err error) error { return fmt.Errorf("testenv: %s: bfdd: %w", d.Host.Name, err) }
	p, err := d.Host.Start(context.WithoutCancel(ctx), "", filepath.Join(FRRDir, "bfdd"),
		"-f", filepath.Join(d.Dir, "bfdd.conf"),
		"-i", filepath.Join(d.Dir, "bfdd.pid"),
		"-z", filepath.Join(d.Dir, "zserv.api"),
		"--vty_socket", d.Dir,
		"--bfdctl", filepath.Join(d.Dir, "bfdd.sock"),
		"-P", "0", "-u", "frr", "-g", "frr", "--log", "stdout")
	if err != nil {
		return fail(err)
	}
	d.Proc = p
	var last error
	err = wait.Until(ctx, bfddStartTimeout, func() bool {
		if p.Exited() {
			return true
		}
		_, last = d.Peer(ctx)
		return last == nil
	})
	if p.Exited() {
		return fail(fmt.Errorf("exited at start: %v\n%s", p.Wait(), p.Log()))
	}
	if err != nil {
		p.Kill()
		return fail(fmt.Errorf("no answer: %w (last: %v)\n%s", err, last, p.Log()))
	}
	return nil
}

// Kill sends bfdd SIGKILL, so no AdminDown leaves it, waits for it to
// exit and returns when the signal was sent.
func (d *BFDD) Kill() time.Time {
	at := time.Now()
	d.Proc.Kill()
	return at
}

// Vtysh runs one vtysh command against bfdd and returns its output. A
// command bfdd rejects is an error carrying what vtysh printed.
func (d *BFDD) Vtysh(ctx context.Context, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	out, err := combined(ctx, exec.CommandContext(ctx, "vtysh", "--vty_socket", d.Dir, "-d", "bfdd", "-c", cmd))
	if err != nil {
		return out, fmt.Errorf("testenv: %s: bfdd: %w", d.Host.Name, err)
	}
	return out, nil
}

// BFDPeer is what the tests read of a peer in `show bfd peers json`.
type BFDPeer struct {
	Peer                   string `json:"peer"`
	Status                 string `json:"status"`
	Diagnostic             string `json:"diagnostic"`
	RemoteDiagnostic       string `json:"remote-diagnostic"`
	ID                     uint32 `json:"id"`
	RemoteID               uint32 `json:"remote-id"`
	RemoteTransmitInterval int    `json:"remote-transmit-interval"`
	RemoteReceiveInterval  int    `json:"remote-receive-interval"`
}

// Peer returns bfdd's view of its peer (the first session to it).
func (d *BFDD) Peer(ctx context.Context) (BFDPeer, error) {
	out, err := d.Vtysh(ctx, "show bfd peers json")
	if err != nil {
		return BFDPeer{}, err
	}
	var peers []BFDPeer
	if err := json.Unmarshal([]byte(out), &peers); err != nil {
		return BFDPeer{}, fmt.Errorf("testenv: %s: show bfd peers json: %w: %s", d.Host.Name, err, out)
	}
	for _, p := range peers {
		if p.Peer == d.peer.String() {
			return p, nil
		}
	}
	return BFDPeer{}, fmt.Errorf("testenv: %s: bfdd has no peer %s: %s", d.Host.Name, d.peer, out)
}

// RequireBFDD is RequireFRR, and fails the test (or skips it, as Require
// does) when FRR's bfdd is not installed.
func RequireBFDD(t T) {
	t.Helper()
	RequireFRR(t)
	if _, err := os.Stat(filepath.Join(FRRDir, "bfdd")); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("FRR's bfdd is not installed: %v", err)
		}
		t.Skipf("skipping: FRR's bfdd is not installed: %v", err)
	}
}
