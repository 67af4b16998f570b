package main

// Hot takeover (`uvxlan run ... --takeover`): the protocol, over the running
// agent's control socket (a unix stream socket):
//
//  1. The successor connects and sends POST /v1/takeover with what it is
//     configured to serve (takeoverRequest: name, port, segments).
//  2. The running agent checks that it serves exactly that; if not, it
//     answers 409 with the difference, changes nothing, and goes on (the
//     successor exits 2).
//  3. Otherwise it duplicates the descriptors of its TAP queues and
//     underlay sockets and snapshots its tables (node.Handover), stops its
//     gossip member without leaving the cluster (node.Abandon), stops
//     accepting on the control socket and the metrics listener (so the
//     successor can bind them), and answers 200 with the handover as JSON,
//     the descriptors riding the first bytes (SCM_RIGHTS). It keeps
//     forwarding.
//  4. The successor adopts the descriptors and the tables (node.New with
//     Config.Inherit), binds the control socket, the metrics and gossip
//     (same name, same address: peers see the same member), starts
//     forwarding, and writes "ready\n".
//  5. On "ready" the old agent stops forwarding and exits 0, leaving its
//     TAPs in place. Without it (the successor failed, or 30 s passed) it
//     exits 1: gossip and the control socket are gone by then, so the host
//     is off the overlay until an agent starts again (its TAPs persist).
//
// For a moment both read the same queues and sockets; nothing queued in the
// kernel is lost.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
)

// takeoverRequest is what the successor says it will serve.
type takeoverRequest struct {
	Name     string                 `json:"name"`
	Port     uint16                 `json:"port"`
	Segments []node.HandoverSegment `json:"segments"`
}

// readyTimeout bounds how long the old agent waits for the successor.
const readyTimeout = 30 * time.Second

// requestFor is the takeover request of a configuration.
func requestFor(cfg *node.Config) takeoverRequest {
	r := takeoverRequest{Name: cfg.Name, Port: cfg.Port}
	for _, s := range cfg.Segments {
		r.Segments = append(r.Segments, node.HandoverSegment{VNI: s.VNI, Dev: s.Dev})
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
// /v1/takeover. stop ends the agent (nil: exit 0).
type takeoverServer struct {
	n       *node.Node
	release func() // stops accepting on the control socket and the metrics
	stop    func(error)
	once    sync.Once
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
	started := false
	t.once.Do(func() { started = true })
	if !started {
		http.Error(w, "a takeover is already under way", http.StatusConflict)
		return
	}
	h, err := t.n.Handover()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer func() {
		for _, f := range h.Files {
			f.Close()
		}
	}()
	body, err := json.Marshal(h)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "takeover needs a hijackable connection", http.StatusInternalServerError)
		return
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		t.stop(errors.New("takeover: the control connection is not a unix socket"))
		return
	}
	// From here on the old agent cannot take back what it gave up.
	t.n.Abandon()
	t.release()
	fds := make([]int, len(h.Files))
	for i, f := range h.Files {
		fds[i] = int(f.Fd())
	}
	msg := append([]byte(fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))), body...)
	first := min(len(msg), 4096)
	if _, _, err := uc.WriteMsgUnix(msg[:first], unix.UnixRights(fds...), nil); err != nil {
		t.stop(fmt.Errorf("takeover: hand over: %w", err))
		return
	}
	if first < len(msg) { // (a successor that has it all may have closed already)
		if _, err := uc.Write(msg[first:]); err != nil {
			t.stop(fmt.Errorf("takeover: hand over: %w", err))
			return
		}
	}
	uc.SetReadDeadline(time.Now().Add(readyTimeout))
	line, err := bufio.NewReader(uc).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.stop(fmt.Errorf("takeover: the successor did not become ready (%q, %v); this host is off the overlay until an agent starts again", line, err))
		return
	}
	t.stop(nil)
}

// takeOver is the successor's end: it asks the agent on control for its
// descriptors and tables. An error before the agent answered 200 changed
// nothing; it is a usage error when the agent serves something else.
func takeOver(ctx context.Context, control string, cfg *node.Config) (*node.Handover, *net.UnixConn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "unix", control)
	if err != nil {
		return nil, nil, badFlag("takeover", control, "no agent answers on the control socket: %v", err)
	}
	uc := c.(*net.UnixConn)
	fail := func(err error) (*node.Handover, *net.UnixConn, error) {
		uc.Close()
		return nil, nil, err
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
	resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(bytes.NewReader(buf[:n]), uc)), nil)
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
	uc.SetDeadline(time.Time{})
	return &h, uc, nil
}
