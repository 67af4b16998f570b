package main

// The control socket is HTTP/1.1 with JSON bodies over a unix socket:
//
//	GET /v1/status  the node's identity and settings
//	GET /v1/fdb     []fdbRow
//	POST /v1/fdb    staticEntry: add or replace a static entry
//	DELETE /v1/fdb?mac=MAC  remove a static entry
//	GET /v1/stats   statsView: encap.Stats and the gossip counters
//	GET /v1/neigh   []neighRow
//	GET /v1/members []memberRow
//	GET /v1/leases  []lease.Lease (routed overlay; empty otherwise)
//
// The client commands (`uvxlan fdb show`, `uvxlan stats`) print these as
// tables, or as they are with --json.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip/lease"
)

type controlServer struct {
	path string
	ln   net.Listener
	srv  *http.Server
}

// listenControl binds the control socket. A stale socket file left by a
// crashed agent is replaced; a live one is an error.
func listenControl(path string) (*controlServer, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, badFlag("control", path, "another agent is already listening there")
	}
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	return &controlServer{path: path, ln: ln}, nil
}

// Serve answers requests about n until Close. It returns nil after Close.
func (s *controlServer) Serve(n *Node) error {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, n.status()) })
	mux.HandleFunc("GET /v1/fdb", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, fdbRows(n.table.Entries(), time.Now())) })
	mux.HandleFunc("GET /v1/stats", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, n.stats()) })
	mux.HandleFunc("POST /v1/fdb", func(w http.ResponseWriter, r *http.Request) {
		var e staticEntry
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&e); err != nil {
			http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := n.table.Set(fdb.Entry{VNI: n.cfg.VNI, MAC: e.MAC, VTEP: e.VTEP, Origin: fdb.OriginStatic}); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		writeJSON(w, e)
	})
	mux.HandleFunc("DELETE /v1/fdb", func(w http.ResponseWriter, r *http.Request) {
		mac, err := fdb.ParseMAC(r.URL.Query().Get("mac"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !n.table.DeleteOrigin(n.cfg.VNI, mac, fdb.OriginStatic) {
			http.Error(w, "no static entry for "+mac.String(), http.StatusNotFound)
			return
		}
		writeJSON(w, map[string]string{"deleted": mac.String()})
	})
	mux.HandleFunc("GET /v1/neigh", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, neighRows(n.neigh.Entries())) })
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, n.gossip.Members()) })
	mux.HandleFunc("GET /v1/leases", func(w http.ResponseWriter, r *http.Request) {
		ls := n.leases.Leases()
		if ls == nil {
			ls = []lease.Lease{}
		}
		writeJSON(w, ls)
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("control socket: %w", err)
	}
	return nil
}

// Close stops serving and removes the socket file. Safe to call twice.
func (s *controlServer) Close() error {
	if s.srv != nil {
		s.srv.Close()
	} else {
		s.ln.Close()
	}
	os.Remove(s.path)
	return nil
}

// statsView is `uvxlan stats --json`: the engine's counters at the top
// level, gossip's under "gossip".
type statsView struct {
	encap.Stats
	Gossip map[string]uint64 `json:"gossip,omitempty"`
}

// fdbRow is one FDB entry as the control socket shows it (the JSON of
// `uvxlan fdb show --json`): vtep is the underlay address alone, as in
// `bridge fdb`, with the UDP port beside it.
type fdbRow struct {
	VNI    fdb.VNI    `json:"vni"`
	MAC    fdb.MAC    `json:"mac"`
	VTEP   netip.Addr `json:"vtep"`
	Port   uint16     `json:"port"`
	Origin fdb.Origin `json:"origin"`
	// AgeSeconds is the time since the entry was added, moved or (learned
	// entries) last seen.
	AgeSeconds float64 `json:"age_seconds"`
}

// staticEntry is the body of POST /v1/fdb.
type staticEntry struct {
	MAC  fdb.MAC        `json:"mac"`
	VTEP netip.AddrPort `json:"vtep"`
}

// neighRow is one neighbour binding (`uvxlan neigh show --json`).
type neighRow struct {
	VNI    fdb.VNI    `json:"vni"`
	IP     netip.Addr `json:"ip"`
	MAC    fdb.MAC    `json:"mac"`
	Origin fdb.Origin `json:"origin"`
}

func neighRows(ns []fdb.Neigh) []neighRow {
	rows := make([]neighRow, len(ns))
	for i, n := range ns {
		rows[i] = neighRow{VNI: n.VNI, IP: n.IP, MAC: n.MAC, Origin: n.Origin}
	}
	return rows
}

// memberRow is one cluster member (`uvxlan members --json`).
type memberRow struct {
	Name    string         `json:"name"`
	Address netip.AddrPort `json:"address"` // gossip address
	VTEP    netip.AddrPort `json:"vtep"`
	State   string         `json:"state"` // alive, suspect, dead, left
	VNIs    []fdb.VNI      `json:"vnis"`
	MAC     fdb.MAC        `json:"mac"`
	Entries int            `json:"entries"` // entries it owns that this node holds
	Self    bool           `json:"self"`
}

func fdbRows(es []fdb.Entry, now time.Time) []fdbRow {
	rows := make([]fdbRow, len(es))
	for i, e := range es {
		rows[i] = fdbRow{VNI: e.VNI, MAC: e.MAC, VTEP: e.VTEP.Addr(), Port: e.VTEP.Port(), Origin: e.Origin,
			AgeSeconds: now.Sub(e.Updated).Round(time.Millisecond).Seconds()}
	}
	return rows
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// controlClient talks to an agent's control socket.
type controlClient struct {
	path string
	hc   *http.Client
}

func newControlClient(path string) *controlClient {
	return &controlClient{path: path, hc: &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}},
	}}
}

// get fetches /v1/<what> and returns the raw JSON body.
func (c *controlClient) get(what string) ([]byte, error) {
	return c.do(http.MethodGet, what, nil)
}

// do sends a request to /v1/<what> with an optional JSON body and returns
// the raw JSON answer; an answer other than 200 is an error with its text.
func (c *controlClient) do(method, what string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://uvxlan/v1/"+what, rd)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) || isConnRefused(err) {
			return nil, fmt.Errorf("no agent answers on %s (is `uvxlan run` running with this --control?): %w", c.path, err)
		}
		return nil, fmt.Errorf("control socket %s: %w", c.path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("control socket %s: %w", c.path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("agent refused: %s", strings.TrimSpace(string(raw)))
	}
	return raw, nil
}

func isConnRefused(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func (c *controlClient) fdb() ([]fdbRow, []byte, error) {
	var v []fdbRow
	raw, err := c.getInto("fdb", &v)
	return v, raw, err
}

func (c *controlClient) neigh() ([]neighRow, []byte, error) {
	var v []neighRow
	raw, err := c.getInto("neigh", &v)
	return v, raw, err
}

func (c *controlClient) members() ([]memberRow, []byte, error) {
	var v []memberRow
	raw, err := c.getInto("members", &v)
	return v, raw, err
}

func (c *controlClient) stats() (statsView, []byte, error) {
	var v statsView
	raw, err := c.getInto("stats", &v)
	return v, raw, err
}

func (c *controlClient) getInto(what string, v any) ([]byte, error) {
	raw, err := c.get(what)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("control socket %s: bad %s answer: %w", c.path, what, err)
	}
	return raw, nil
}
