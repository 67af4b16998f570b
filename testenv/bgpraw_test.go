package testenv

import (
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uvxlan/uvxlan/testenv/wait"
)

var (
	rawRID = netip.MustParseAddr("198.18.0.2")
	rawMAC = net.HardwareAddr{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01}
)

// The bytes, field by field, as the comment at the top of bgpraw.go lays
// them out.
func TestBGPRawBytes(t *testing.T) {
	tests := []struct {
		desc string
		got  []byte
		want string // hex, spaces between fields
	}{
		{"OPEN", openBody(BGPRawConfig{ASN: 65000, RouterID: rawRID}),
			"04 fde8 0009 c6120002 0e 02 0c 0104 0019 00 46 4104 0000fde8"},
		{"OPEN, 4-octet AS", openBody(BGPRawConfig{ASN: 4200000000, RouterID: rawRID}),
			"04 5ba0 0009 c6120002 0e 02 0c 0104 0019 00 46 4104 fa56ea00"},
		{"type-2", EVPNMACRoute(rawRID, rawMAC, 100),
			"02 21 0001 c6120002 0001 00000000000000000000 00000000 30 02005e100001 00 000064"},
		{"overrun", EVPNLengthOverrun.NLRI(rawRID, rawMAC, 100),
			"02 2b 0001 c6120002 0001 00000000000000000000 00000000 30 02005e100001 00 000064"},
		{"MAC length 7", EVPNMACLength7.NLRI(rawRID, rawMAC, 100),
			"02 22 0001 c6120002 0001 00000000000000000000 00000000 38 02005e100001ee 00 000064"},
		{"truncated", EVPNTruncated.NLRI(rawRID, rawMAC, 100), "02 05 0001 c61200"},
		{"MAC length field", EVPNMACLengthField.NLRI(rawRID, rawMAC, 100),
			"02 21 0001 c6120002 0001 00000000000000000000 00000000 38 02005e100001 00 000064"},
		{"UPDATE, iBGP", updateBody(BGPRawConfig{ASN: 65000, PeerASN: 65000, RouterID: rawRID}, []byte{0xaa}, 100, rawRID),
			"0000 002f" + // no withdrawn routes, 47 bytes of attributes
				" 40 01 01 00" + // ORIGIN IGP
				" 40 02 00" + // AS_PATH, empty
				" 40 05 04 00000064" + // LOCAL_PREF 100
				" c0 10 10 0002 fde8 00000064 030c 0000 0000 0008" + // RT 65000:100, encapsulation VXLAN
				" 90 0e 000a 0019 46 04 c6120002 00 aa"}, // MP_REACH_NLRI l2vpn/evpn, next hop, NLRI
		{"UPDATE, eBGP", updateBody(BGPRawConfig{ASN: 65002, PeerASN: 65000, RouterID: rawRID}, []byte{0xaa}, 100, rawRID),
			"0000 002e 40 01 01 00 40 02 06 02 01 0000fdea" +
				" c0 10 10 0002 fdea 00000064 030c 0000 0000 0008 90 0e 000a 0019 46 04 c6120002 00 aa"},
	}
	for _, tt := range tests {
		want := strings.ReplaceAll(tt.want, " ", "")
		if got := hex.EncodeToString(tt.got); got != want {
			t.Errorf("%s:\nwant %s\ngot  %s", tt.desc, want, got)
		}
	}
}

// fakePeer plays the other side of a session over a pipe: it reads our
// OPEN, answers with its own and a KEEPALIVE, then runs then.
func fakePeer(t *testing.T, then func(c net.Conn)) net.Conn {
	ours, theirs := net.Pipe()
	go func() {
		defer theirs.Close()
		send := func(typ byte, body []byte) {
			s := &BGPRawSpeaker{conn: theirs}
			s.write(typ, body)
		}
		if typ, _, err := readMessage(theirs); err != nil || typ != bgpOpen {
			t.Errorf("fake peer: want an OPEN, got type %d, %v", typ, err)
			return
		}
		send(bgpOpen, openBody(BGPRawConfig{ASN: 65000, RouterID: netip.MustParseAddr("198.18.0.1")}))
		if typ, _, err := readMessage(theirs); err != nil || typ != bgpKeepalive {
			t.Errorf("fake peer: want a KEEPALIVE, got type %d, %v", typ, err)
			return
		}
		send(bgpKeepalive, nil)
		then(theirs)
	}()
	return ours
}

func TestBGPRawSpeakerReport(t *testing.T) {
	ctx := t.Context()
	cfg := BGPRawConfig{ASN: 65000, RouterID: rawRID}

	t.Run("notification", func(t *testing.T) {
		conn := fakePeer(t, func(c net.Conn) {
			if typ, _, err := readMessage(c); err != nil || typ != bgpUpdate {
				t.Errorf("fake peer: want an UPDATE, got type %d, %v", typ, err)
			}
			(&BGPRawSpeaker{conn: c}).write(bgpNotification, []byte{3, 10, 0xde, 0xad})
		})
		s, err := OpenBGP(ctx, conn, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendEVPN(EVPNTruncated.NLRI(rawRID, rawMAC, 100), 100); err != nil {
			t.Fatal(err)
		}
		rep := s.Watch(ctx, 10*time.Second)
		s.Close()
		if rep.Notification == nil || rep.Notification.String() != "UPDATE Message Error/Invalid Network Field (3/10)" ||
			!slices.Equal(rep.Notification.Data, []byte{0xde, 0xad}) {
			t.Errorf("want NOTIFICATION 3/10 with data dead, got %+v", rep)
		}
		if rep.PeerASN != 65000 || rep.PeerID != netip.MustParseAddr("198.18.0.1") || rep.Keepalives != 1 {
			t.Errorf("want peer AS 65000, id 198.18.0.1, 1 keepalive, got %+v", rep)
		}
	})

	t.Run("close", func(t *testing.T) {
		conn := fakePeer(t, func(c net.Conn) {
			readMessage(c)
			(&BGPRawSpeaker{conn: c}).write(bgpUpdate, []byte{0, 0, 0, 0})
		})
		s, err := OpenBGP(ctx, conn, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s.SendEVPN(EVPNValid.NLRI(rawRID, rawMAC, 100), 100)
		rep := s.Watch(ctx, 10*time.Second)
		if !rep.Closed || rep.Notification != nil || rep.Updates != 1 || rep.Err != nil {
			t.Errorf("want closed after 1 update, no notification, got %+v", rep)
		}
	})

	t.Run("refused", func(t *testing.T) {
		ours, theirs := net.Pipe()
		go func() {
			readMessage(theirs)
			(&BGPRawSpeaker{conn: theirs}).write(bgpNotification, []byte{2, 2}) // bad peer AS
			theirs.Close()
		}()
		_, err := OpenBGP(ctx, ours, cfg)
		if err == nil || !strings.Contains(err.Error(), "OPEN Message Error (2/2)") {
			t.Errorf("want the NOTIFICATION in the error, got %v", err)
		}
	})
}

// TestBGPRawSpeakerAgainstFRR: h2 opens iBGP sessions to FRR on h1 and
// sends one EVPN UPDATE per case. The valid route is installed and the
// session kept; for each malformed one, what FRR 8.4 did is logged and the
// route must not be in its table, whatever FRR chose (NOTIFICATION and
// reset, or treat-as-withdraw), and bgpd must still run.
func TestBGPRawSpeakerAgainstFRR(t *testing.T) {
	t.Parallel()
	requireFRR(t)
	tb := NewForTest(t, Config{Hosts: 2})
	ctx := t.Context()
	h1, h2 := tb.Host(1), tb.Host(2)
	f, err := h1.StartFRR(ctx, FRRConfig{ASN: 65000, Neighbors: []FRRNeighbor{{Addr: h2.Underlay}}})
	if err != nil {
		t.Fatal(err)
	}

	// open retries while FRR still holds the last session down (it waits
	// a few seconds after a reset before it accepts again).
	open := func(t *testing.T) *BGPRawSpeaker {
		var s *BGPRawSpeaker
		var last error
		err := wait.Until(ctx, 60*time.Second, func() bool {
			conn, err := h2.DialTCP(ctx, netip.AddrPortFrom(h1.Underlay, 179))
			if err == nil {
				s, err = OpenBGP(ctx, conn, BGPRawConfig{ASN: 65000, RouterID: h2.Underlay})
			}
			last = err
			return err == nil
		})
		if err != nil {
			t.Fatalf("no session with FRR: %v (last: %v)", err, last)
		}
		return s
	}
	installed := func(mac net.HardwareAddr) bool {
		routes, err := f.EVPNRoutes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range routes {
			if slices.Equal(r.MAC, mac) {
				return true
			}
		}
		return false
	}

	for i, m := range []MalformedEVPN{EVPNValid, EVPNLengthOverrun, EVPNMACLength7, EVPNTruncated, EVPNMACLengthField} {
		t.Run(m.String(), func(t *testing.T) {
			mac := net.HardwareAddr{0x02, 0, 0x5e, 0x10, 0, byte(i + 1)}
			s := open(t)
			defer s.Close()
			if err := s.SendEVPN(m.NLRI(h2.Underlay, mac, 100), 100); err != nil {
				t.Fatal(err)
			}
			if m == EVPNValid {
				// 30 s: a CI run beside another suite saw nothing installed
				// (and nothing logged by bgpd) within 10 s.
				if err := wait.Until(ctx, 30*time.Second, func() bool { return installed(mac) }); err != nil {
					t.Fatalf("FRR did not install the valid route: %v", err)
				}
			}
			// Two of FRR's keepalive intervals (3 s): long enough to
			// see the session kept.
			rep := s.Watch(ctx, 7*time.Second)
			what := "kept the session"
			switch {
			case rep.Notification != nil:
				what = "sent NOTIFICATION " + rep.Notification.String()
			case rep.Closed:
				what = "closed the connection without a NOTIFICATION"
			}
			t.Logf("%s: FRR %s (%d keepalives, %d updates received)", m, what, rep.Keepalives, rep.Updates)
			if rep.Err != nil {
				t.Errorf("reading FRR's messages: %v", rep.Err)
			}
			if m == EVPNValid {
				if rep.Notification != nil || rep.Closed {
					t.Errorf("a valid route: want the session kept, got %+v", rep)
				}
				return
			}
			if installed(mac) {
				t.Errorf("FRR installed the malformed route of %s", mac)
			}
			if f.BGPd.Exited() {
				t.Fatalf("bgpd exited:\n%s", f.BGPd.Log())
			}
		})
	}

	// The convenience form, retried while FRR holds the last session down.
	var rep BGPRawReport
	err = wait.Until(ctx, 60*time.Second, func() bool {
		rep, err = SendMalformedEVPN(ctx, h2, h1.Underlay, 65000, 100, EVPNMACLength7, 5*time.Second)
		return err == nil
	})
	if err != nil {
		t.Fatalf("SendMalformedEVPN: %v", err)
	}
	if rep.Notification == nil && !rep.Closed {
		t.Errorf("SendMalformedEVPN: want a NOTIFICATION or a close, got %+v", rep)
	}

	// The passive side: FRR dials h2 (connect retry 2 s) and we answer.
	ln, err := h2.ListenTCP(netip.AddrPortFrom(h2.Underlay, 179))
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	select {
	case c, ok := <-accepted:
		if !ok {
			t.Fatal("accept failed")
		}
		s, err := OpenBGP(ctx, c, BGPRawConfig{ASN: 65000, RouterID: h2.Underlay})
		if err != nil {
			t.Fatalf("FRR dialled us, but: %v", err)
		}
		mac := net.HardwareAddr{0x02, 0, 0x5e, 0x10, 0, 0x99}
		if err := s.SendEVPN(EVPNValid.NLRI(h2.Underlay, mac, 100), 100); err != nil {
			t.Fatal(err)
		}
		if err := wait.Until(ctx, 10*time.Second, func() bool { return installed(mac) }); err != nil {
			t.Errorf("FRR did not install the route sent on the session it dialled: %v", err)
		}
		s.Close()
	case <-time.After(30 * time.Second):
		t.Error("FRR did not dial h2:179 within 30 s")
	}
	ln.Close()

	var lines []string
	for _, l := range strings.Split(f.BGPd.Log(), "\n") {
		if strings.Contains(l, h2.Underlay.String()) {
			lines = append(lines, l)
		}
	}
	t.Logf("bgpd said:\n%s", strings.Join(lines, "\n"))

}

// The peer's OPEN is input: reading it must not panic on anything.
func FuzzParseOpen(f *testing.F) {
	f.Add(openBody(BGPRawConfig{ASN: 4200000000, RouterID: rawRID}))
	f.Add([]byte{4, 0, 1, 0, 9, 1, 2, 3, 4, 4, 2, 2, 65, 4})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r BGPRawReport
		r.parseOpen(b)
	})
}

// A write that times out half-way (a peer that stops reading, as a busy
// agent does for seconds) leaves a message cut on the wire: nothing may
// follow it, or the peer reads the next message's bytes as the rest of
// the cut one and answers Message Header Error (1/1), as the agent did in
// TestEVPNPrefixLimitOnePerUpdate under load (a keepalive after an UPDATE
// cut by the 5 s write deadline). Every write after a failed one fails,
// and the stream holds whole messages only.
func TestBGPRawCutWriteEndsTheSession(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	s := &BGPRawSpeaker{conn: client, writeTimeout: 200 * time.Millisecond}
	body := make([]byte, 4000)
	writes := 0
	for ; writes < 100000; writes++ { // until the socket buffers are full
		if s.write(bgpUpdate, body) != nil {
			break
		}
	}
	if err := s.write(bgpKeepalive, nil); err == nil {
		t.Errorf("a keepalive went out after a cut UPDATE")
	}
	whole := 0
	for {
		_, _, err := readMessage(server)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("after %d whole messages (of %d written): %v", whole, writes, err)
			}
			t.Logf("the stream ends: %v", err)
			break
		}
		whole++
	}
	t.Logf("%d UPDATEs written before the deadline cut one; %d whole messages read", writes, whole)
}
