package gossip

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

// toyType is the type of the toy extension of these tests.
const toyType = MinExtensionType + 3

var errToyMismatch = errors.New("toy flavours differ")

// toy is a minimal extension: a grow-only set of words, broadcast one by one
// and merged whole in push/pulls. Its metadata is a flavour; nodes of
// different flavours refuse each other.
type toy struct {
	flavour string
	h       *Handle

	mu                 sync.Mutex
	words              map[string]string // word → how it arrived: "local", "broadcast", "state"
	alive              map[string]bool   // members as NotifyMember told
	started, ran, done bool
}

var _ Extension = (*toy)(nil)

func newToy(flavour string) *toy {
	return &toy{flavour: flavour, words: map[string]string{}, alive: map[string]bool{}}
}

func (t *toy) Type() byte { return toyType }

func (t *toy) Start(h *Handle) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.h, t.started = h, true
	return nil
}

func (t *toy) Run(ctx context.Context) {
	t.mu.Lock()
	t.ran = true
	t.mu.Unlock()
	<-ctx.Done()
	t.mu.Lock()
	t.done = true
	t.mu.Unlock()
}

func (t *toy) Meta() []byte { return []byte(t.flavour) }

func (t *toy) CheckMeta(peer string, theirs []byte) error {
	if string(theirs) != t.flavour {
		return fmt.Errorf("%w: node %q has %q, we have %q", errToyMismatch, peer, theirs, t.flavour)
	}
	return nil
}

// add adds a word of ours and broadcasts it.
func (t *toy) add(w string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.words[w] = "local"
	t.h.Broadcast(w, []byte(w))
}

func (t *toy) NotifyMsg(b []byte) error {
	if len(b) == 0 {
		return errors.New("empty word")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.words[string(b)]; !ok {
		t.words[string(b)] = "broadcast"
		t.h.Broadcast(string(b), bytes.Clone(b)) // relay what was new
	}
	return nil
}

func (t *toy) LocalState() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ws []string
	for w := range t.words {
		ws = append(ws, w)
	}
	slices.Sort(ws)
	return []byte(strings.Join(ws, "\n"))
}

func (t *toy) MergeRemoteState(b []byte) error {
	if bytes.ContainsRune(b, 0) {
		return errors.New("NUL in a word")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for w := range strings.SplitSeq(string(b), "\n") {
		if _, ok := t.words[w]; !ok && w != "" {
			t.words[w] = "state"
		}
	}
	return nil
}

func (t *toy) NotifyMember(name string, alive bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.alive[name] = alive
}

func (t *toy) word(w string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.words[w]
}

// A toy extension's broadcasts reach the other nodes, its state reaches a
// node that joins later by push/pull, it hears of members, and it runs
// while the node runs.
func TestExtensionToy(t *testing.T) { inBubble(t, testExtensionToy) }

func testExtensionToy(t *testing.T) {
	toys := []*toy{newToy("vanilla"), newToy("vanilla"), newToy("vanilla")}
	var nodes []*testNode
	for i := range 2 {
		cfg := testConfig(i, 0, nil)
		cfg.Extensions = []Extension{toys[i]}
		if i > 0 {
			cfg.Seeds = []string{nodes[0].Addr().String()}
		}
		nodes = append(nodes, start(t, cfg))
	}
	waitMembers(t, nodes)
	if !toys[0].started {
		t.Fatal("Start was not called")
	}
	toys[0].add("apple")
	wait.For(t, 5*time.Second, "b has a's word from a broadcast", func() error {
		if got := toys[1].word("apple"); got != "broadcast" {
			return fmt.Errorf("b has apple as %q", got)
		}
		return nil
	})

	// c joins later: the broadcast is long gone, the push/pull of the join
	// brings the word.
	cfg := testConfig(2, 0, nil)
	cfg.Extensions = []Extension{toys[2]}
	cfg.Seeds = []string{nodes[0].Addr().String()}
	c := start(t, cfg)
	nodes = append(nodes, c)
	waitMembers(t, nodes)
	wait.For(t, 5*time.Second, "c has the word from a push/pull", func() error {
		if got := toys[2].word("apple"); got != "state" {
			return fmt.Errorf("c has apple as %q", got)
		}
		return nil
	})
	wait.For(t, 5*time.Second, "the toys hear of members", func() error {
		toys[0].mu.Lock()
		defer toys[0].mu.Unlock()
		if !toys[0].alive[c.name] || !toys[0].ran {
			return fmt.Errorf("a's toy: alive %v, ran %v", toys[0].alive, toys[0].ran)
		}
		if _, ok := toys[0].alive[nodes[0].name]; ok {
			return errors.New("a's toy was told about a itself")
		}
		return nil
	})
	c.kill()
	wait.For(t, 20*time.Second, "a's toy hears c is gone", func() error {
		toys[0].mu.Lock()
		defer toys[0].mu.Unlock()
		if toys[0].alive[c.name] {
			return errors.New("c still alive")
		}
		return nil
	})
	toys[2].mu.Lock()
	done := toys[2].done
	toys[2].mu.Unlock()
	if !done {
		t.Error("c's toy still runs after c stopped")
	}
	if s := nodes[1].Stats(); s.UnknownExtension != 0 || s.DecodeErrors != 0 {
		t.Errorf("b: unknown extension %d, decode errors %d", s.UnknownExtension, s.DecodeErrors)
	}
}

// A node whose extension refuses the cluster's metadata (or that lacks an
// extension the cluster runs) cannot join, and Run says why.
func TestExtensionMetaMismatch(t *testing.T) { inBubble(t, testExtensionMetaMismatch) }

func testExtensionMetaMismatch(t *testing.T) {
	cfg := testConfig(0, 0, nil)
	cfg.Extensions = []Extension{newToy("vanilla")}
	a := start(t, cfg)

	for _, tt := range []struct {
		desc string
		exts []Extension
		want string
	}{
		{"other flavour", []Extension{newToy("chocolate")}, `toy flavours differ: node "n00" has "vanilla", we have "chocolate"`},
		{"no toy", nil, `node "n00" runs extension 19 (replicated state), which this node does not`},
	} {
		cfg := testConfig(1, 0, nil)
		cfg.Extensions = tt.exts
		cfg.Seeds = []string{a.Addr().String()}
		n, err := New(inNetwork(t, cfg))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = n.Run(ctx)
		cancel()
		var mm mismatch
		if err == nil || !errors.As(err, &mm) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Run = %v; want a mismatch saying %q", tt.desc, err, tt.want)
		}
	}
	if n := a.ml.NumMembers(); n != 1 {
		t.Errorf("a has %d members, want 1", n)
	}
	if a.Stats().RefusedNodes == 0 {
		t.Error("a refused nobody")
	}
}

// An extension without metadata is optional: a node that does not run it
// is a member of a cluster that does, both ways, and what the extension
// sends it is skipped.
func TestOptionalExtension(t *testing.T) { inBubble(t, testOptionalExtension) }

func testOptionalExtension(t *testing.T) {
	cfg := testConfig(0, 0, nil)
	ty := newToy("") // no metadata
	cfg.Extensions = []Extension{ty}
	a := start(t, cfg)
	cfg = testConfig(1, 0, nil)
	cfg.Seeds = []string{a.Addr().String()}
	b := start(t, cfg)
	waitMembers(t, []*testNode{a, b})
	ty.add("plum")
	wait.For(t, 10*time.Second, "b skips the toy's broadcast", func() error {
		if b.Stats().UnknownExtension == 0 {
			return errors.New("nothing skipped yet")
		}
		return nil
	})
	if a.Stats().RefusedNodes != 0 || b.Stats().RefusedNodes != 0 {
		t.Errorf("refused nodes: a %d, b %d", a.Stats().RefusedNodes, b.Stats().RefusedNodes)
	}
}

func TestExtensionConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		desc string
		exts []Extension
	}{
		{"nil", []Extension{nil}},
		{"reserved type", []Extension{&typed{newToy(""), MinExtensionType - 1}}},
		{"same type twice", []Extension{newToy("a"), newToy("b")}},
		{"metadata too long", []Extension{newToy(strings.Repeat("x", MaxExtensionMeta+1))}},
	} {
		cfg := testConfig(0, 0, nil)
		cfg.Extensions = tt.exts
		if n, err := New(cfg); err == nil {
			n.Close()
			t.Errorf("%s: New accepted the extensions", tt.desc)
		}
	}
}

// typed is an extension with another type.
type typed struct {
	Extension
	typ byte
}

func (t *typed) Type() byte { return t.typ }

// A push/pull state or broadcast of an extension this node does not run is
// skipped and counted; what else the state holds is merged.
func TestUnknownExtensionSkipped(t *testing.T) { inBubble(t, testUnknownExtensionSkipped) }

func testUnknownExtensionSkipped(t *testing.T) {
	cfg := testConfig(0, 0, nil)
	ty := newToy("vanilla")
	cfg.Extensions = []Extension{ty}
	a := start(t, cfg)
	d := &delegate{a.Node}
	state := appendState(nil, nil, []section{
		{typ: MinExtensionType, data: []byte("from an extension we do not run")},
		{typ: toyType, data: []byte("pear")},
		{typ: 250, data: nil},
	})
	before := a.Stats()
	d.MergeRemoteState(state, false)
	d.NotifyMsg([]byte{MinExtensionType + 1, 1, 2, 3})
	d.NotifyMsg([]byte{toyType, 'f', 'i', 'g'})
	after := a.Stats()
	if got := after.UnknownExtension - before.UnknownExtension; got != 3 {
		t.Errorf("UnknownExtension +%d, want +3 (two sections, one broadcast)", got)
	}
	if after.DecodeErrors != before.DecodeErrors {
		t.Errorf("DecodeErrors %d → %d", before.DecodeErrors, after.DecodeErrors)
	}
	if ty.word("pear") != "state" || ty.word("fig") != "broadcast" {
		t.Errorf("the toy has pear %q, fig %q", ty.word("pear"), ty.word("fig"))
	}
	// An extension's decoding error is gossip's decode error.
	d.MergeRemoteState(appendState(nil, nil, []section{{typ: toyType, data: []byte{0}}}), false)
	d.NotifyMsg([]byte{toyType})
	if got := a.Stats().DecodeErrors - after.DecodeErrors; got != 2 {
		t.Errorf("DecodeErrors +%d, want +2", got)
	}
}

// TestStateGolden pins the push/pull state format (bump protoVersion if it
// changes).
func TestStateGolden(t *testing.T) {
	recs := sampleRecords()[:1]
	entries := hex.EncodeToString(appendEntries(nil, recs))
	b := appendState(nil, recs, []section{{typ: 0x10, data: []byte{0xaa, 0xbb}}, {typ: 0x20}})
	want := "03" + fmt.Sprintf("%08x", len(entries)/2) + entries + "10" + "00000002" + "aabb" + "20" + "00000000"
	if got := hex.EncodeToString(b); got != want {
		t.Fatalf("encoding:\n got %s\nwant %s", got, want)
	}
	gotRecs, sections, err := decodeState(b)
	if err != nil || !slices.Equal(gotRecs, recs) || len(sections) != 2 ||
		sections[0].typ != 0x10 || !bytes.Equal(sections[0].data, []byte{0xaa, 0xbb}) || sections[1].typ != 0x20 || len(sections[1].data) != 0 {
		t.Fatalf("decodeState = %+v, %+v, %v", gotRecs, sections, err)
	}
	if recs, sections, err := decodeState(appendState(nil, nil, nil)); err != nil || len(recs) != 0 || len(sections) != 0 {
		t.Fatalf("empty state: %v, %v, %v", recs, sections, err)
	}
}

func TestDecodeStateErrors(t *testing.T) {
	good := appendState(nil, sampleRecords(), []section{{typ: 0x10, data: []byte{1, 2}}})
	tests := []struct {
		desc string
		in   []byte
	}{
		{"empty", nil},
		{"entries message", appendEntries(nil, sampleRecords())},
		{"entries longer than the message", []byte{msgState, 0, 0, 1, 0}},
		{"bad entries", func() []byte { b := bytes.Clone(good); b[5+5] = 9; return b }()},
		{"section cut short", good[:len(good)-1]},
		{"section header cut short", append(bytes.Clone(good), 0x11, 0, 0)},
		{"huge section", append(bytes.Clone(good), 0x11, 0xff, 0xff, 0xff, 0xff)},
		{"section of gossip's types", appendState(nil, nil, []section{{typ: msgEntries}})},
		{"sections out of order", appendState(nil, nil, []section{{typ: 0x20}, {typ: 0x10}})},
		{"section twice", appendState(nil, nil, []section{{typ: 0x20}, {typ: 0x20}})},
	}
	for _, tt := range tests {
		if recs, sections, err := decodeState(tt.in); !errors.Is(err, errDecode) {
			t.Errorf("%s: decodeState = %+v, %+v, %v; want an errDecode", tt.desc, recs, sections, err)
		}
	}
}

func FuzzDecodeState(f *testing.F) {
	f.Add(appendState(nil, sampleRecords(), []section{{typ: 0x10, data: []byte{1, 2}}, {typ: 0xff}}))
	f.Add(appendState(nil, nil, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, sections, err := decodeState(b)
		if err != nil {
			return
		}
		if again := appendState(nil, recs, sections); !bytes.Equal(again, b) {
			t.Fatalf("decodable state %x re-encodes to %x", b, again)
		}
		if _, again, err := decodeState(appendState(nil, recs, sections)); err != nil || !reflect.DeepEqual(again, sections) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, sections)
		}
	})
}
