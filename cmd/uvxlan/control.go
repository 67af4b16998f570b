package main

// The control socket's server: an adapter over the node's read API that
// serves the API controlapi declares (its package doc lists the endpoints;
// its types are the JSON of each answer, and its Client is what the CLI's
// commands and perf/chaos use). POST /v1/takeover is takeover.go's. Who may
// connect, read and change is set out above listenControl.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/uvxlan/uvxlan/cmd/uvxlan/controlapi"
	"github.com/uvxlan/uvxlan/cmd/uvxlan/node"
	"github.com/uvxlan/uvxlan/fdb"
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
		var e controlapi.StaticEntry
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
		rows := make([]controlapi.Member, len(ms))
		for i, m := range ms {
			rows[i] = controlapi.Member{Member: m, Encrypted: encrypted, PathMTU: n.PathMTU(m.VTEP.Addr()), Wire: n.Wire(m.VTEP.Addr())}
		}
		writeJSON(w, rows)
	})
	mux.HandleFunc("GET /v1/leases", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, n.Leases()) })
	serveBGP(mux, n)
	serveBFD(mux, n)
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

// newStatsView is the answer of GET /v1/stats: st's counters, the totals
// or (vni not 0) that segment's at the top level.
func newStatsView(st node.Stats, vni fdb.VNI) controlapi.Stats {
	v := controlapi.Stats{Encrypted: st.Encrypted, Total: st.Total, Gossip: gossipCounters(st), Node: counterMap(st.Node), BFD: st.BFD}
	for _, s := range st.Segments {
		if vni != 0 && s.VNI != vni {
			continue
		}
		v.Segments = append(v.Segments, controlapi.SegmentStats{VNI: s.VNI, Dev: s.Dev, Stats: s.Stats})
		if vni != 0 {
			v.Total = s.Stats
		}
	}
	return v
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

// neighRows are the bindings of vni (0: all).
func neighRows(ns []fdb.Neigh, vni fdb.VNI) []controlapi.NeighRow {
	rows := make([]controlapi.NeighRow, 0, len(ns))
	for _, n := range ns {
		if vni == 0 || n.VNI == vni {
			rows = append(rows, controlapi.NeighRow{VNI: n.VNI, IP: n.IP, MAC: n.MAC, Origin: n.Origin})
		}
	}
	return rows
}

// fdbRows are the entries of vni (0: all).
func fdbRows(es []fdb.Entry, vni fdb.VNI, now time.Time) []controlapi.FDBRow {
	rows := make([]controlapi.FDBRow, 0, len(es))
	for _, e := range es {
		if vni != 0 && e.VNI != vni {
			continue
		}
		rows = append(rows, controlapi.FDBRow{VNI: e.VNI, MAC: e.MAC, VTEP: e.VTEP.Addr(), Port: e.VTEP.Port(), Origin: e.Origin,
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
