package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// What the client takes of an API server that sends too much, or nothing:
// a clear error and a bounded heap, or a new watch.

// testSubnets is a subnet manager of node "a" for the API server at url,
// through a kubeconfig (insecure-skip-tls-verify for an https one), and
// its log.
func testSubnets(t *testing.T, url string) (*Subnets, *syncBuffer) {
	t.Helper()
	skip := strings.HasPrefix(url, "https://")
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: %t}}]
users: [{name: u, user: {token: t0ken}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, url, skip)), 0o600)
	logs := &syncBuffer{}
	s, err := New(Config{Kubeconfig: kc, NodeName: "a", Network: network, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return s, logs
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// streamA writes n bytes of 'a' to w, in chunks, until the client goes.
func streamA(w io.Writer, n int64) {
	chunk := bytes.Repeat([]byte("a"), 64<<10)
	for ; n > 0; n -= int64(len(chunk)) {
		if _, err := w.Write(chunk[:min(int64(len(chunk)), n)]); err != nil {
			return
		}
	}
}

// peakHeap runs f and returns its error and the highest heap (HeapAlloc)
// seen above the one before it, sampled every millisecond.
func peakHeap(f func() error) (error, uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > base && ms.HeapAlloc-base > peak.Load() {
				peak.Store(ms.HeapAlloc - base)
			}
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	err := f()
	close(done)
	<-sampled
	return err, peak.Load()
}

// A list of Nodes whose one Node has a 300 MiB annotation, made as it is
// sent: the list fails, naming the cap, and the heap stays far below the
// size of the Node (on the unbounded client: 1 070 MiB).
func TestListBounded(t *testing.T) {
	const annotation = 300 << 20
	var sent atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "" {
			http.Error(w, "this test serves no watch", http.StatusNotFound)
			return
		}
		cw := &countWriter{w: w, n: &sent}
		fmt.Fprint(cw, `{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"big","annotations":{"x":"`)
		streamA(cw, annotation)
		fmt.Fprint(cw, `"}},"spec":{"podCIDR":"10.244.9.0/24"}}]}`)
	}))
	defer srv.Close()
	s, _ := testSubnets(t, srv.URL)
	err, peak := peakHeap(func() error {
		_, err := s.listAndWatch(context.Background())
		return err
	})
	t.Logf("list with a %d MiB annotation: %v; heap peak +%.1f MiB; %.1f MiB sent", annotation>>20, err, float64(peak)/(1<<20), float64(sent.Load())/(1<<20))
	if err == nil || !strings.Contains(err.Error(), "a Node exceeds 4 MiB") {
		t.Errorf("list: %v, want an error saying a Node exceeds 4 MiB", err)
	}
	if peak > 64<<20 {
		t.Errorf("the heap grew by %d MiB reading the list, want at most 64", peak>>20)
	}
}

// The pages of a list are bounded too, and the Nodes held.
func TestListPagesBounded(t *testing.T) {
	var pages atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "" {
			http.Error(w, "this test serves no watch", http.StatusNotFound)
			return
		}
		if got := r.URL.Query().Get("limit"); got != "500" {
			t.Errorf("list asks for limit=%q, want 500", got)
		}
		p := pages.Add(1)
		// A page of 500 Nodes of 200 KiB each (within the cap on a Node),
		// then more pages forever.
		fmt.Fprintf(w, `{"metadata":{"resourceVersion":"7","continue":"p%d"},"items":[`, p)
		for i := range 500 {
			if i > 0 {
				fmt.Fprint(w, ",")
			}
			fmt.Fprintf(w, `{"metadata":{"name":"n%d-%d","annotations":{"x":"`, p, i)
			streamA(w, 200<<10)
			fmt.Fprint(w, `"}}}`)
		}
		fmt.Fprint(w, "]}")
	}))
	defer srv.Close()
	s, _ := testSubnets(t, srv.URL)
	err, peak := peakHeap(func() error {
		_, err := s.listAndWatch(context.Background())
		return err
	})
	t.Logf("pages of 100 MiB: %v after %d pages; heap peak +%.1f MiB", err, pages.Load(), float64(peak)/(1<<20))
	if err == nil || !strings.Contains(err.Error(), "a page of the list of Nodes exceeds 64 MiB") || pages.Load() != 1 {
		t.Errorf("list: %v after %d pages, want an error saying a page exceeds 64 MiB after 1", err, pages.Load())
	}
	if peak > 64<<20 {
		t.Errorf("the heap grew by %d MiB reading the list, want at most 64", peak>>20)
	}

	// Small pages that never end: the list stops at maxNodes.
	pages.Store(0)
	srv2 := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") != "" {
			http.Error(w, "this test serves no watch", http.StatusNotFound)
			return
		}
		p := pages.Add(1)
		fmt.Fprintf(w, `{"metadata":{"resourceVersion":"7","continue":"p%d"},"items":[`, p)
		for i := range 500 {
			if i > 0 {
				fmt.Fprint(w, ",")
			}
			fmt.Fprintf(w, `{"metadata":{"name":"n%d-%d"}}`, p, i)
		}
		fmt.Fprint(w, "]}")
	}))
	defer srv2.Close()
	s, _ = testSubnets(t, srv2.URL)
	_, err = s.listAndWatch(context.Background())
	t.Logf("pages without end: %v after %d pages", err, pages.Load())
	if err == nil || !strings.Contains(err.Error(), "more than 10000 Nodes") {
		t.Errorf("list: %v after %d pages, want an error saying there are more than 10000 Nodes", err, pages.Load())
	}
}

type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// A watch event that does not end (256 MiB, then the server gives up):
// the watch fails at the cap, naming it, and the heap stays bounded (on
// the unbounded client, an endless one reached 1.3 GiB in 20 s).
func TestWatchEventBounded(t *testing.T) {
	const event = 256 << 20
	var sent atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "" {
			fmt.Fprint(w, `{"metadata":{"resourceVersion":"7"},"items":[]}`)
			return
		}
		cw := &countWriter{w: w, n: &sent}
		fmt.Fprint(cw, `{"type":"ADDED","object":{"metadata":{"name":"x","annotations":{"a":"`)
		streamA(cw, event)
	}))
	defer srv.Close()
	s, _ := testSubnets(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err, peak := peakHeap(func() error {
		_, err := s.listAndWatch(ctx)
		return err
	})
	t.Logf("watch event of %d MiB: %v; heap peak +%.1f MiB; %.1f MiB sent", event>>20, err, float64(peak)/(1<<20), float64(sent.Load())/(1<<20))
	if err == nil || !strings.Contains(err.Error(), "a Node exceeds 4 MiB") {
		t.Errorf("watch: %v, want an error saying a Node exceeds 4 MiB", err)
	}
	if peak > 64<<20 {
		t.Errorf("the heap grew by %d MiB reading the watch, want at most 64", peak>>20)
	}
}

// A watch that brings nothing, not even a bookmark: after the idle time
// it is closed and opened again from its resource version.
func TestWatchIdle(t *testing.T) {
	var watches atomic.Int64
	rvs := make(chan string, 16)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "" {
			fmt.Fprint(w, `{"metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"b","resourceVersion":"5"},"spec":{"podCIDR":"10.244.2.0/24"}}]}`)
			return
		}
		if watches.Add(1) == 1 { // one event, then silence
			fmt.Fprintln(w, `{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}}`)
		}
		rvs <- r.URL.Query().Get("resourceVersion")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	s, logs := testSubnets(t, srv.URL)
	s.client.watchIdle = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.listAndWatch(ctx)
		done <- err
	}()
	start := time.Now()
	var got []string
	for len(got) < 3 {
		select {
		case rv := <-rvs:
			got = append(got, rv)
		case err := <-done:
			t.Fatalf("listAndWatch returned %v", err)
		case <-time.After(20 * time.Second):
			t.Fatalf("%d watches in 20 s (resource versions %v), want a new one after each 300 ms of silence", len(got), got)
		}
	}
	t.Logf("3 watches in %v, from resource versions %v", time.Since(start).Round(time.Millisecond), got)
	if want := []string{"7", "9", "9"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("watches from resource versions %v, want %v (the list's, then the bookmark's)", got, want)
	}
	if n, _ := s.get("b"); n == nil {
		t.Error("the listed Node b was lost while the watch was idle")
	}
	if !strings.Contains(logs.String(), "the watch of the Nodes brought nothing") {
		t.Errorf("no log of the idle watch:\n%s", logs)
	}
}

// A server over plain http, or whose certificate is not checked: used,
// with a warning.
func TestInsecureServerWarned(t *testing.T) {
	for _, tc := range []struct {
		desc string
		srv  *httptest.Server
		want string
	}{
		{"http", httptest.NewServer(http.NotFoundHandler()), "the API server is reached over plain http"},
		{"insecure-skip-tls-verify", httptest.NewTLSServer(http.NotFoundHandler()), "insecure-skip-tls-verify: the API server's certificate is not checked"},
	} {
		_, logs := testSubnets(t, tc.srv.URL)
		tc.srv.Close()
		if !strings.Contains(logs.String(), "level=WARN msg=\""+tc.want) {
			t.Errorf("%s: no warning %q in the log:\n%s", tc.desc, tc.want, logs)
		}
	}
}

// Whatever a page of a list holds, decodePage returns an error or the
// Nodes it holds; a list it encoded itself decodes to the same Nodes.
func FuzzDecodePage(f *testing.F) {
	f.Add([]byte(`{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"x"},"items":[{"metadata":{"name":"a","annotations":{"uvxlan.io/vtep":"198.18.0.1:4789"}},"spec":{"podCIDR":"10.244.1.0/24"}}]}`))
	f.Add([]byte(`{"metadata":{},"items":null}`))
	f.Add([]byte(`{"items":[{},{"metadata":{"name":"b"}}],"metadata":{"resourceVersion":"1"}}`))
	f.Add([]byte(`[1,2]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var got []*node
		meta, err := decodePage(bytes.NewReader(b), func(n *node) error {
			got = append(got, n)
			return nil
		})
		if err != nil {
			return
		}
		list := map[string]any{"metadata": meta, "items": got}
		again, err := json.Marshal(list)
		if err != nil {
			t.Fatalf("decoded %q, cannot encode it: %v", b, err)
		}
		var got2 []*node
		meta2, err := decodePage(bytes.NewReader(again), func(n *node) error {
			got2 = append(got2, n)
			return nil
		})
		if err != nil || meta2 != meta || len(got2) != len(got) {
			t.Fatalf("%s: decoded again %v %+v and %d Nodes, want %+v and %d", again, err, meta2, len(got2), meta, len(got))
		}
		for i := range got {
			a, _ := json.Marshal(got[i])
			b, _ := json.Marshal(got2[i])
			if !bytes.Equal(a, b) {
				t.Fatalf("Node %d: %s decoded again as %s", i, a, b)
			}
		}
	})
}
