package main

// Hot takeover (`uvxlan run ... --takeover`): the protocol, over the running
// agent's control socket (a unix stream socket):
//
//  1. The successor connects and sends POST /v1/takeover with what it is
//     configured to serve (takeoverRequest: name, port, segments),
//     "release": true (it will ask for the release, step 4) and "final":
//     true (it reads the last state, step 7).
//  2. The running agent checks that it serves exactly that; if not, it
//     answers 409 with the difference, changes nothing, and goes on (the
//     successor exits 2).
//  3. Otherwise it duplicates the descriptors of its TAP queues and
//     underlay sockets and snapshots its tables and the gossip members it
//     knows (node.Handover), and answers 200 with the handover as JSON,
//     the descriptors riding the first bytes (SCM_RIGHTS), and the header
//     "Uvxlan-Takeover: release". It changes nothing else and keeps
//     forwarding, gossiping and serving.
//  4. The successor checks the handover and writes "release\n". The agent
//     then stops its gossip member without leaving the cluster
//     (node.Abandon) and stops accepting on the control socket and the
//     metrics listener (so the successor can bind them), and writes
//     "released\n". It keeps forwarding.
//  5. The successor adopts the descriptors and the tables (node.New with
//     Config.Inherit), binds the control socket, the metrics and gossip
//     (same name, same address: peers see the same member; it joins the
//     members the agent knew, so a node without --join is back in its
//     cluster at once), starts forwarding, and writes "ready\n".
//  6. On "ready" the old agent, if asked ("final" in the request) and it
//     encrypts (it then sets "final" in the handover's encryption), stops
//     receiving and writes its last state (node.FinalHandover: the replay
//     windows) as one line of JSON; then it stops forwarding and exits 0,
//     leaving its TAPs in place.
//  7. The successor reads that line (within finalTimeout) and takes it
//     (node.TakeFinal); until then it opens no ESP with the handed-over
//     keys (node/encrypt.go), and the old agent's receiving serves.
//
// A successor that goes away before step 4 (it crashed, or found the
// handover wrong) costs nothing: the agent closes its copies of the
// descriptors, logs it and goes on as before; another takeover may follow.
// One that goes away after step 4 leaves the agent without gossip or
// control socket: it exits 1 at once (within readyTimeout if the
// successor hangs), so that the service manager starts an agent again (the
// TAPs persist). Descriptors are passed by number, never through
// (*os.File).Fd, which may switch the open file description, shared with
// the agent's own queues and sockets, to blocking mode.
//
// An agent of a release before the release step (no "release" in the
// request, or no header in the answer) does step 4's abandon before
// sending the descriptors, and the successor skips step 4.
//
// For a moment both read the same queues and sockets; nothing queued in the
// kernel is lost.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
)

// takeoverRequest is what the successor says it will serve.
type takeoverRequest struct {
	Name     string                 `json:"name"`
	Port     uint16                 `json:"port"`
	Segments []node.HandoverSegment `json:"segments"`
	// Release: the successor asks for the release (step 4) once it has
	// checked the handover.
	Release bool `json:"release"`
	// Final: the successor reads the agent's last state after "ready"
	// (steps 6 and 7).
	Final bool `json:"final"`
}

// releaseHeader, in the answer, says the agent waits for "release\n".
const releaseHeader = "Uvxlan-Takeover"

// readyTimeout bounds how long the old agent waits for the successor.
const readyTimeout = 30 * time.Second

// takeoverPauseEnv, a duration in the successor's environment, holds it
// that long between receiving the handover and the release (step 4),
// while the agent forwards and gossips: the takeover at its worst point,
// for tests (TestEncryptTakeoverPaused, TestEncryptTakeoverReplay). At
// most readyTimeout/2.
const takeoverPauseEnv = "UVXLAN_TEST_TAKEOVER_PAUSE"

// takeoverReadyPauseEnv, a duration in the successor's environment, holds
// it that long between starting to forward and writing "ready" (step 5),
// while both agents forward: the successor has set the host up (routed
// mode's addresses, routes and masquerade rules) and the old agent has not
// ended yet, for tests (TestRoutedTakeoverKeepsMasq). At most
// readyTimeout/2.
const takeoverReadyPauseEnv = "UVXLAN_TEST_TAKEOVER_READY_PAUSE"

// requestFor is the takeover request of a configuration.
func requestFor(cfg *node.Config) takeoverRequest {
	r := takeoverRequest{Name: cfg.Name, Port: cfg.Port, Release: true, Final: true}
	for _, s := range cfg.Segments {
		r.Segments = append(r.Segments, node.HandoverSegment{VNI: s.VNI, Dev: s.Dev})
	}
	if b := cfg.BGP; b != nil && b.L3VNI != 0 { // the L3 VNI's TAP, the last segment (node/l3.go)
		dev := b.L3Dev
		if dev == "" {
			dev = node.DefaultL3Dev(b.L3VNI)
		}
		r.Segments = append(r.Segments, node.HandoverSegment{VNI: b.L3VNI, Dev: dev})
	}
	return r
}

// mismatch says how what the running agent serves differs from a request;
// "" when it does not.
func mismatch(st node.Status, r takeoverRequest) string {
	have := make([]string, len(st.Segments))
	for i, s := range st.Segments {
		have[i] = fmt.Sprintf("VNI %d on %s", s.VNI, s.Dev)
	}
	want := make([]string, len(r.Segments))
	for i, s := range r.Segments {
		want[i] = fmt.Sprintf("VNI %d on %s", s.VNI, s.Dev)
	}
	switch {
	case st.Name != r.Name:
		return fmt.Sprintf("this agent is %q, the successor would be %q (give the same --name)", st.Name, r.Name)
	case st.Port != r.Port:
		return fmt.Sprintf("this agent serves port %d, the successor %d", st.Port, r.Port)
	case !slices.Equal(have, want):
		return fmt.Sprintf("this agent serves %s; the successor would serve %s (give the same --segment, or --vni and --dev)",
			strings.Join(have, ", "), strings.Join(want, ", "))
	}
	return ""
}

// takeoverServer is the running agent's end: the handler of POST
// /v1/takeover. release stops accepting on the control socket and the
// metrics; stop ends the agent (nil: exit 0).
type takeoverServer struct {
	n       *node.Node
	log     *slog.Logger
	release func()
	stop    func(error)
	busy    atomic.Bool // a takeover is under way
}

func (t *takeoverServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req takeoverRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil {
		http.Error(w, "bad takeover request: "+err.Error(), http.StatusBadRequest)
		return
	}
	if why := mismatch(t.n.Status(), req); why != "" {
		http.Error(w, why, http.StatusConflict)
		return
	}
	if !t.busy.CompareAndSwap(false, true) {
		http.Error(w, "a takeover is already under way", http.StatusConflict)
		return
	}
	if !t.handOver(w, req.Release, req.Final) {
		t.busy.Store(false) // nothing was given up: another may try
	}
}

// handOver runs steps 3 to 6 of the protocol; it reports whether the agent
// gave anything up (then it ends, by stop).
func (t *takeoverServer) handOver(w http.ResponseWriter, release, final bool) bool {
	h, err := t.n.Handover()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return false
	}
	final = final && h.Encryption != nil
	if final {
		h.Encryption.Final = true
	}
	defer func() {
		for _, f := range h.Files {
			f.Close()
		}
	}()
	body, err := json.Marshal(h)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return false
	}
	fds, err := rawFDs(h.Files)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return false
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "takeover needs a hijackable connection", http.StatusInternalServerError)
		return false
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return false
	}
	defer conn.Close()
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		t.log.Warn("takeover refused: the control connection is not a unix socket")
		return false
	}
	letGo := func() {
		// From here on the old agent cannot take back what it gave up.
		t.n.Abandon()
		t.release()
	}
	head := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
	if release {
		head += releaseHeader + ": release\r\n"
	} else {
		letGo() // a successor of an earlier release
	}
	msg := append([]byte(fmt.Sprintf("%sContent-Length: %d\r\n\r\n", head, len(body))), body...)
	first := min(len(msg), 4096)
	uc.SetDeadline(time.Now().Add(readyTimeout))
	_, _, err = uc.WriteMsgUnix(msg[:first], unix.UnixRights(fds...), nil)
	if err == nil && first < len(msg) { // (a successor that has it all may have closed already)
		_, err = uc.Write(msg[first:])
	}
	rd := bufio.NewReader(uc)
	if release {
		if err != nil {
			t.log.Warn("takeover failed: the handover did not reach the successor; going on", "err", err)
			return false
		}
		line, err := rd.ReadString('\n')
		if line != "release\n" {
			t.log.Warn("takeover failed: the successor went away before taking over; going on", "said", line, "err", err)
			return false
		}
		letGo()
		_, err = uc.Write([]byte("released\n"))
	}
	if err != nil {
		t.stop(fmt.Errorf("takeover: hand over: %w", err))
		return true
	}
	line, err := rd.ReadString('\n')
	if line != "ready\n" {
		t.stop(fmt.Errorf("takeover: the successor did not become ready (%q, %v); this host is off the overlay until an agent starts again", line, err))
		return true
	}
	if final {
		body, err := json.Marshal(t.n.FinalHandover())
		if err == nil {
			uc.SetDeadline(time.Now().Add(finalTimeout))
			_, err = uc.Write(append(body, '\n'))
		}
		if err != nil {
			t.log.Warn("takeover: could not hand the last state to the successor", "err", err)
		}
	}
	t.stop(nil)
	return true
}

// finalTimeout bounds the successor's wait for the agent's last state
// (step 7): the agent sends it at once on "ready".
const finalTimeout = 5 * time.Second

// finishTakeover is step 7 at the successor, once it wrote "ready" on
// conn: it reads the agent's last state and gives it to n (nil if it did
// not come in time).
func finishTakeover(conn *net.UnixConn, h *node.Handover, n *node.Node, log *slog.Logger) {
	if h.Encryption == nil || !h.Encryption.Final {
		return
	}
	start := time.Now()
	conn.SetDeadline(start.Add(finalTimeout))
	var f node.HandoverFinal
	if err := json.NewDecoder(io.LimitReader(conn, 256<<20)).Decode(&f); err != nil {
		log.Warn("takeover: the agent taken over did not hand over its last state", "err", err)
		n.TakeFinal(nil)
		return
	}
	n.TakeFinal(&f)
	log.Info("takeover: took the last state of the agent taken over", "after_ready", time.Since(start))
}

// rawFDs returns the numbers of files' descriptors, which stay valid while
// the files are open. It reads them through SyscallConn, which leaves
// their mode alone, unlike (*os.File).Fd.
func rawFDs(files []*os.File) ([]int, error) {
	fds := make([]int, len(files))
	for i, f := range files {
		rc, err := f.SyscallConn()
		if err == nil {
			err = rc.Control(func(fd uintptr) { fds[i] = int(fd) })
		}
		if err != nil {
			return nil, fmt.Errorf("takeover: descriptor of %s: %w", f.Name(), err)
		}
	}
	return fds, nil
}

// takeOver is the successor's end: it asks the agent on control for its
// descriptors and tables, and for the release (steps 1 to 4). An error
// before the agent let go changed nothing; it is a usage error when the
// agent serves something else. The caller writes "ready\n" on the
// connection once it forwards.
func takeOver(ctx context.Context, control string, cfg *node.Config) (*node.Handover, *net.UnixConn, error) {
	a, err := askTakeover(ctx, control, cfg)
	if err != nil {
		return nil, nil, err
	}
	if d, _ := time.ParseDuration(os.Getenv(takeoverPauseEnv)); d > 0 {
		time.Sleep(min(d, readyTimeout/2))
	}
	if a.release {
		line := ""
		if _, err = a.conn.Write([]byte("release\n")); err == nil {
			line, err = a.rd.ReadString('\n')
		}
		if line != "released\n" {
			for _, f := range a.h.Files {
				f.Close()
			}
			a.conn.Close()
			return nil, nil, fmt.Errorf("takeover: the agent did not let go (%q, %v)", line, err)
		}
	}
	a.conn.SetDeadline(time.Time{})
	return a.h, a.conn, nil
}

// takeoverAnswer is the running agent's answer to a takeover request.
type takeoverAnswer struct {
	h       *node.Handover
	conn    *net.UnixConn
	rd      *bufio.Reader // conn's, past the answer
	release bool          // the agent waits for "release\n" (step 4)
}

// askTakeover does steps 1 and 3 of the protocol, and checks the handover.
func askTakeover(ctx context.Context, control string, cfg *node.Config) (*takeoverAnswer, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "unix", control)
	if err != nil {
		return nil, badFlag("takeover", control, "no agent answers on the control socket: %v", err)
	}
	uc := c.(*net.UnixConn)
	fail := func(err error) (*takeoverAnswer, error) {
		uc.Close()
		return nil, err
	}
	body, _ := json.Marshal(requestFor(cfg))
	req := fmt.Sprintf("POST /v1/takeover HTTP/1.1\r\nHost: uvxlan\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	uc.SetDeadline(time.Now().Add(readyTimeout))
	if _, err := uc.Write([]byte(req)); err != nil {
		return fail(fmt.Errorf("takeover: %w", err))
	}
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(node.MaxHandoverFiles*4))
	n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return fail(fmt.Errorf("takeover: read the answer: %w", err))
	}
	var files []*os.File
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return fail(fmt.Errorf("takeover: %w", err))
		}
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				files = append(files, os.NewFile(uintptr(fd), fmt.Sprintf("handover-%d", fd)))
			}
		}
	}
	closeFiles := func() {
		for _, f := range files {
			f.Close()
		}
	}
	rd := bufio.NewReader(io.MultiReader(bytes.NewReader(buf[:n]), uc))
	resp, err := http.ReadResponse(rd, nil)
	if err != nil {
		closeFiles()
		return fail(fmt.Errorf("takeover: bad answer: %w", err))
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		closeFiles()
		return fail(fmt.Errorf("takeover: bad answer: %w", err))
	}
	if resp.StatusCode != http.StatusOK {
		closeFiles()
		why := strings.TrimSpace(string(raw))
		if resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusNotFound {
			return fail(badFlag("takeover", control, "%s", why))
		}
		return fail(fmt.Errorf("takeover: the agent refused: %s", why))
	}
	var h node.Handover
	if err := json.Unmarshal(raw, &h); err != nil {
		closeFiles()
		return fail(fmt.Errorf("takeover: bad handover: %w", err))
	}
	h.Files = files
	if err := h.Check(cfg); err != nil {
		closeFiles()
		return fail(err)
	}
	return &takeoverAnswer{h: &h, conn: uc, rd: rd, release: resp.Header.Get(releaseHeader) == "release"}, nil
}
