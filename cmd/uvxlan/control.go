package main

// The control socket is HTTP/1.1 with JSON bodies over a unix socket, an
// adapter over the node's read API:
//
//	GET /v1/status   node.Status: identity, settings, segments
//	GET /v1/fdb      []fdbRow
//	POST /v1/fdb     staticEntry: add or replace a static entry
//	DELETE /v1/fdb?mac=MAC[&vni=N]  remove a static entry
//	GET /v1/stats    statsView: the data path's counters in total and per
//	                 segment, and gossip's
//	GET /v1/neigh    []neighRow
//	GET /v1/members  []memberRow
//	GET /v1/leases   []lease.Lease (routed overlay; empty otherwise)
//
// fdb, neigh and stats take ?vni=N to show one segment. The client commands
// (`uvxlan fdb show`, `uvxlan stats`) print these as tables, or as they are
// with --json.
//
// POST /v1/takeover is takeover.go's. Who may connect, read and change is
// set out above listenControl.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/encap"
	"github.com/uvxlan/uvxlan/fdb"
	"github.com/uvxlan/uvxlan/gossip"
)

type controlServer struct {
	path string
	ln   *net.UnixListener
	// takeover, when set, serves POST /v1/takeover (takeover.go).
	takeover http.Handler
	mu       sync.Mutex // guards srv and closed: Serve and Close may race
	srv      *http.Server
	done     bool // Close was called
}

// Who may use the control socket:
//
//   - the socket is mode 0660, owned by the agent's user and group, from the
//     moment it appears at --control: it is bound inside a private directory
//     (mode 0700, made next to it), given its mode there and renamed into
//     place, so no umask and no moment of a wider mode can let anyone else
//     connect (a chmod after bind left a gap, and a connection made in it
//     stays). The process umask is never touched: it is process-wide;
//   - whoever may connect (the user and the group) may read: GET status, fdb,
//     neigh, stats, members, leases;
//   - changes (POST and DELETE: static entries, takeover, which hands over
//     the TAPs and sockets) are served only to a peer whose uid (SO_PEERCRED)
//     is 0 or the agent's own; any other gets 403;
//   - the directory of --control, and every directory above it, must be
//     owned by root or the agent's user, and the directory itself writable
//     by its owner alone (those above it may be sticky, such as /tmp):
//     otherwise anyone could put a socket of their own there for clients and
//     a --takeover successor to talk to;
//   - only a socket that no agent answers on is replaced at --control; any
//     other file there is an error naming --control, and is left alone.

// controlSocketMode is the control socket's mode: the agent's user and
// group.
const controlSocketMode = 0o660

// listenControl binds the control socket at path (see above).
func listenControl(path string) (*controlServer, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, badFlag("control", path, "%v", err)
	}
	if err := checkControlDir(dir); err != nil {
		return nil, badFlag("control", path, "%v", err)
	}
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() != fs.ModeSocket:
		return nil, badFlag("control", path, "%s is not a socket (%v): only a socket left by an agent is replaced; remove it or choose another path", path, fi.Mode().Type())
	case err == nil:
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, badFlag("control", path, "another agent is already listening there")
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, badFlag("control", path, "the socket there is not stale (%v): remove it if no agent uses it", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, badFlag("control", path, "%v", err)
	}
	ln, err := listenPrivate(path)
	if err != nil {
		return nil, badFlag("control", path, "%v", err)
	}
	return &controlServer{path: path, ln: ln}, nil
}

// listenPrivate binds a unix socket in a private directory beside path,
// gives it controlSocketMode and renames it to path (replacing a stale
// socket there in one step).
func listenPrivate(path string) (*net.UnixListener, error) {
	priv, err := os.MkdirTemp(filepath.Dir(path), ".uvx") // mode 0700
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(priv)
	tmp := filepath.Join(priv, "s")
	if len(tmp) >= len(unix.RawSockaddrUnix{}.Path) {
		return nil, fmt.Errorf("the path is too long: the socket is bound first at %s, longer than a unix socket path may be", tmp)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false) // the socket file is path's now; Close removes it
	if err := os.Chmod(tmp, controlSocketMode); err != nil {
		ln.Close()
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// checkControlDir checks the directory of the control socket and those
// above it (see above).
func checkControlDir(dir string) error {
	abs, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	abs, err = filepath.Abs(abs)
	if err != nil {
		return err
	}
	euid := uint32(os.Geteuid())
	for d, first := abs, true; ; d, first = filepath.Dir(d), false {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner", d)
		}
		perm := fi.Mode().Perm()
		switch {
		case st.Uid != 0 && st.Uid != euid:
			return fmt.Errorf("directory %s belongs to uid %d, not to root or the agent's user: its owner could replace the socket", d, st.Uid)
		case perm&0o022 != 0 && (first || fi.Mode()&fs.ModeSticky == 0):
			return fmt.Errorf("directory %s is writable by group or others (mode %v): anyone could put a socket there; use a directory only its owner can write, such as /run/uvxlan", d, fi.Mode())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// peerUID is the context key of a control connection's peer uid
// (SO_PEERCRED); -1 when it could not be read.
type peerUID struct{}

// peerContext records the peer's uid of a control connection.
func peerContext(ctx context.Context, c net.Conn) context.Context {
	uid := -1
	if uc, ok := c.(*net.UnixConn); ok {
		if raw, err := uc.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) {
				if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
					uid = int(cred.Uid)
				}
			})
		}
	}
	return context.WithValue(ctx, peerUID{}, uid)
}

// guard serves reads (GET, HEAD) to whoever could connect, and changes
// (static entries, takeover) only to uid 0 and the agent's own uid.
func guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			uid, ok := r.Context().Value(peerUID{}).(int)
			if !ok || uid < 0 || (uid != 0 && uid != os.Geteuid()) {
				http.Error(w, fmt.Sprintf("forbidden: uid %d may read this agent's state but not change it: "+
					"changes and takeover are for root and the agent's user (uid %d)", uid, os.Geteuid()), http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// vniFilter reads ?vni=N: 0 when absent; an error for a VNI the node does
// not serve.
func vniFilter(r *http.Request, n *node.Node) (fdb.VNI, error) {
	s := r.URL.Query().Get("vni")
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil || !fdb.VNI(v).Valid() {
		return 0, fmt.Errorf("bad vni %q: want 1 to %d", s, fdb.MaxVNI)
	}
	if !n.Serves(fdb.VNI(v)) {
		return 0, fmt.Errorf("this agent serves no segment with VNI %d (it serves %v)", v, n.VNIs())
	}
	return fdb.VNI(v), nil
}

// staticVNI is the VNI of a static entry: the one given, else the node's
// only one.
func staticVNI(vni fdb.VNI, n *node.Node) (fdb.VNI, error) {
	if vni != 0 {
		if !n.Serves(vni) {
			return 0, fmt.Errorf("this agent serves no segment with VNI %d (it serves %v)", vni, n.VNIs())
		}
		return vni, nil
	}
	if vnis := n.VNIs(); len(vnis) == 1 {
		return vnis[0], nil
	}
	return 0, fmt.Errorf("this agent serves several VNIs (%v): give --vni", n.VNIs())
}

// Serve answers requests about n until Close. It returns nil after Close.
func (s *controlServer) Serve(n *node.Node) error {
	mux := http.NewServeMux()
	filtered := func(h func(w http.ResponseWriter, vni fdb.VNI)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			vni, err := vniFilter(r, n)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			h(w, vni)
		}
	}
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, n.Status()) })
	mux.HandleFunc("GET /v1/fdb", filtered(func(w http.ResponseWriter, vni fdb.VNI) {
		writeJSON(w, fdbRows(n.Entries(), vni, time.Now()))
	}))
	mux.HandleFunc("GET /v1/stats", filtered(func(w http.ResponseWriter, vni fdb.VNI) { writeJSON(w, newStatsView(n.Stats(), vni)) }))
	mux.HandleFunc("POST /v1/fdb", func(w http.ResponseWriter, r *http.Request) {
		var e staticEntry
		if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&e); err != nil {
			http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		vni, err := staticVNI(e.VNI, n)
		if err == nil {
			err = n.AddStatic(vni, e.MAC, e.VTEP)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		e.VNI = vni
		writeJSON(w, e)
	})
	mux.HandleFunc("DELETE /v1/fdb", func(w http.ResponseWriter, r *http.Request) {
		mac, err := fdb.ParseMAC(r.URL.Query().Get("mac"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		vni, err := vniFilter(r, n)
		if err == nil {
			vni, err = staticVNI(vni, n)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !n.DeleteStatic(vni, mac) {
			http.Error(w, fmt.Sprintf("no static entry for %s in VNI %d", mac, vni), http.StatusNotFound)
			return
		}
		writeJSON(w, map[string]string{"deleted": mac.String()})
	})
	mux.HandleFunc("GET /v1/neigh", filtered(func(w http.ResponseWriter, vni fdb.VNI) { writeJSON(w, neighRows(n.Neighbors(), vni)) }))
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		encrypted := n.Status().Encrypted
		ms := n.Members()
		rows := make([]memberOut, len(ms))
		for i, m := range ms {
			rows[i] = memberOut{m, encrypted, n.PathMTU(m.VTEP.Addr()), n.Wire(m.VTEP.Addr())}
		}
		writeJSON(w, rows)
	})
	mux.HandleFunc("GET /v1/leases", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, n.Leases()) })
	serveBGP(mux, n)
	if s.takeover != nil {
		mux.Handle("POST /v1/takeover", s.takeover)
	}

	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return nil
	}
	s.srv = &http.Server{Handler: guard(mux), ConnContext: peerContext, ReadHeaderTimeout: 5 * time.Second}
	srv := s.srv
	s.mu.Unlock()
	if err := srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("control socket: %w", err)
	}
	return nil
}

// Close stops serving and removes the socket file. Safe to call twice (the
// second call does nothing), and before, during or after Serve.
func (s *controlServer) Close() error {
	s.mu.Lock()
	first := !s.done
	s.done = true
	srv := s.srv
	s.mu.Unlock()
	if !first {
		// The path may be a successor's socket by now (takeover).
		return nil
	}
	if srv != nil {
		srv.Close()
	} else {
		s.ln.Close()
	}
	os.Remove(s.path)
	return nil
}

// statsView is `uvxlan stats --json`: the counters at the top level (the
// totals, or one segment's with ?vni=), gossip's under "gossip", and each
// segment's under "segments".
type statsView struct {
	Encrypted bool // gossip is encrypted
	Total     encap.Stats
	Gossip    map[string]uint64
	Node      map[string]uint64 // the node's own counters (node.Counters)
	Segments  []segmentStatsView
}

// segmentStatsView is one segment's counters, with its VNI and TAP.
type segmentStatsView struct {
	VNI   fdb.VNI
	Dev   string
	Stats encap.Stats
}

func newStatsView(st node.Stats, vni fdb.VNI) statsView {
	v := statsView{Encrypted: st.Encrypted, Total: st.Total, Gossip: gossipCounters(st), Node: counterMap(st.Node)}
	for _, s := range st.Segments {
		if vni != 0 && s.VNI != vni {
			continue
		}
		v.Segments = append(v.Segments, segmentStatsView{VNI: s.VNI, Dev: s.Dev, Stats: s.Stats})
		if vni != 0 {
			v.Total = s.Stats
		}
	}
	return v
}

func (v statsView) MarshalJSON() ([]byte, error) {
	m := v.Total.Map()
	m["gossip"] = v.Gossip
	m["encrypted"] = v.Encrypted
	m["node"] = v.Node
	segs := v.Segments
	if segs == nil {
		segs = []segmentStatsView{}
	}
	m["segments"] = segs
	return json.Marshal(m)
}

func (v *statsView) UnmarshalJSON(b []byte) error {
	var rest struct {
		Encrypted bool               `json:"encrypted"`
		Gossip    map[string]uint64  `json:"gossip"`
		Node      map[string]uint64  `json:"node"`
		Segments  []segmentStatsView `json:"segments"`
	}
	if err := json.Unmarshal(b, &rest); err != nil {
		return err
	}
	v.Encrypted, v.Gossip, v.Node, v.Segments = rest.Encrypted, rest.Gossip, rest.Node, rest.Segments
	return v.Total.UnmarshalJSON(b)
}

func (s segmentStatsView) MarshalJSON() ([]byte, error) {
	m := s.Stats.Map()
	m["vni"], m["dev"] = s.VNI, s.Dev
	return json.Marshal(m)
}

func (s *segmentStatsView) UnmarshalJSON(b []byte) error {
	var id struct {
		VNI fdb.VNI `json:"vni"`
		Dev string  `json:"dev"`
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return err
	}
	s.VNI, s.Dev = id.VNI, id.Dev
	return s.Stats.UnmarshalJSON(b)
}

// gossipCounters are gossip's counters and, in routed mode, the leases'
// or the Kubernetes subnet manager's, by name.
func gossipCounters(st node.Stats) map[string]uint64 {
	m := map[string]uint64{}
	for _, f := range gossipFields(st) {
		m[f.name] = f.value
	}
	return m
}

// counterMap is a stats struct's fields by JSON name.
func counterMap(v any) map[string]uint64 {
	m := map[string]uint64{}
	for _, f := range statFields(v) {
		m[f.name] = f.value
	}
	return m
}

// statField is one field of a stats struct: its JSON name, its value, and
// whether it is a level (tagged metric:"gauge") rather than an event count.
type statField struct {
	name  string
	value uint64
	gauge bool
}

// gossipFields are the fields of gossip's stats and, in routed mode, the
// leases' or the Kubernetes subnet manager's.
func gossipFields(st node.Stats) []statField {
	fs := statFields(st.Gossip)
	if st.Leases != nil {
		fs = append(fs, statFields(*st.Leases)...)
	}
	if st.Subnets != nil {
		fs = append(fs, statFields(st.Subnets)...)
	}
	return fs
}

// statFields reads the uint64 fields of a stats struct through their tags,
// where they are declared.
func statFields(v any) []statField {
	rv := reflect.ValueOf(v)
	rt := rv.Type()
	var out []statField
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || f.Type.Kind() != reflect.Uint64 {
			continue
		}
		out = append(out, statField{name: name, value: rv.Field(i).Uint(), gauge: f.Tag.Get("metric") == "gauge"})
	}
	return out
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

// staticEntry is the body of POST /v1/fdb; VNI 0 means the agent's only
// one.
type staticEntry struct {
	VNI  fdb.VNI        `json:"vni,omitempty"`
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

// neighRows are the bindings of vni (0: all).
func neighRows(ns []fdb.Neigh, vni fdb.VNI) []neighRow {
	rows := make([]neighRow, 0, len(ns))
	for _, n := range ns {
		if vni == 0 || n.VNI == vni {
			rows = append(rows, neighRow{VNI: n.VNI, IP: n.IP, MAC: n.MAC, Origin: n.Origin})
		}
	}
	return rows
}

// memberOut is what the agent serves for one member: the member, and
// whether gossip with it is encrypted (the cluster's setting, --gossip-key-file
// or --insecure-gossip).
type memberOut struct {
	gossip.Member
	Encrypted bool `json:"encrypted"`
	// PathMTU is the path MTU measured towards its VTEP; 0: unknown
	// (itself, or not measured yet).
	PathMTU int `json:"path_mtu"`
	// Wire is how VXLAN travels to it: "esp", "esp-pending" (no key
	// agreed yet), "esp-held" (gossip lost it; its address stays bound to
	// its key) or "vxlan" (node.Node.Wire).
	Wire string `json:"wire"`
}

// memberRow is one cluster member (`uvxlan members --json`).
type memberRow struct {
	Encrypted bool           `json:"encrypted"` // gossip is encrypted (the same for all rows)
	Name      string         `json:"name"`
	Address   netip.AddrPort `json:"address"` // gossip address
	VTEP      netip.AddrPort `json:"vtep"`
	State     string         `json:"state"` // alive, suspect, dead, left, gone (--encrypt: no longer in gossip, its address still bound to its key)
	VNIs      []fdb.VNI      `json:"vnis"`
	MAC       fdb.MAC        `json:"mac"`
	Entries   int            `json:"entries"` // entries it owns that this node holds
	Self      bool           `json:"self"`
	PathMTU   int            `json:"path_mtu"` // measured path MTU to its VTEP; 0: unknown
	Wire      string         `json:"wire"`     // esp, esp-pending (no key yet), esp-held (lost by gossip, still keyed) or vxlan (--encrypt)
	// Protocol is the gossip metadata version it speaks now: 7, or 6, 5
	// or 4 while a member of an older release is in the cluster.
	Protocol uint8 `json:"protocol"`
	// PartialCsum: it takes partial inner checksums (protocol 7 on).
	PartialCsum bool `json:"partial_checksums"`
	// SourcePorts are the UDP ports it sends VXLAN from besides its VTEP
	// port (protocol 6 on; absent: any port is accepted from it).
	SourcePorts *gossip.SourcePorts `json:"source_ports,omitempty"`
	// The keys pinned to it: TAP MACs, TAP addresses (see gossip/pinned.go).
	PinnedMACs  []fdb.MAC           `json:"pinned_macs"`
	PinnedAddrs []gossip.PinnedAddr `json:"pinned_addresses"`
}

// fdbRows are the entries of vni (0: all).
func fdbRows(es []fdb.Entry, vni fdb.VNI, now time.Time) []fdbRow {
	rows := make([]fdbRow, 0, len(es))
	for _, e := range es {
		if vni != 0 && e.VNI != vni {
			continue
		}
		rows = append(rows, fdbRow{VNI: e.VNI, MAC: e.MAC, VTEP: e.VTEP.Addr(), Port: e.VTEP.Port(), Origin: e.Origin,
			AgeSeconds: now.Sub(e.Updated).Round(time.Millisecond).Seconds()})
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
