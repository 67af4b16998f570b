// Package bfd runs the agent's BFD sessions to the endpoints it monitors:
// RFC 5880 asynchronous mode over RFC 5881 single hop. It knows nothing of
// frames, TAPs or tables: the node hands it the control packets that
// arrive for it (Manager.Receive) and gives it a function that sends one
// (Config.Send, from UDP source port 49152–65535, to port 3784, TTL 255);
// it reports state changes (Config.Event).
//
// What it implements, by section of RFC 5880:
//   - §4.1: the control packet's mandatory section, with its own small
//     codec (packet.go); every packet sent is 24 bytes, version 1.
//   - §6.2, §6.8.6: the state machine with its three-way handshake
//     (Down → Init → Up), the peer's Down or AdminDown taking an Up
//     session Down with diagnostic 3 (neighbor signaled session down),
//     and the reception checks: version 1, Length within 24 and the
//     payload, Detect Mult not 0, M bit 0, My Discriminator not 0, Your
//     Discriminator 0 only in Down and AdminDown packets and otherwise
//     naming a session to the sender's address, A bit 0; and RFC 5881
//     §5's TTL 255. A packet that fails one is dropped, counted by reason
//     (stats.go) and changes nothing.
//   - §6.8.1, §6.3: discriminators random, nonzero and unique; a packet
//     with Your Discriminator 0 is matched by its source address (one
//     session per peer address).
//   - §6.8.3, §6.5: slow start (Desired Min TX 1 s until Up), then a
//     poll sequence announcing Config.Interval, ended by the peer's
//     Final; a peer's poll is answered with a Final at once.
//   - §6.8.4: detection time = the peer's Detect Mult × max(our Required
//     Min RX, the peer's Desired Min TX); expired, an Init or Up session
//     goes Down with diagnostic 1 (control detection time expired) and
//     forgets the peer's discriminator.
//   - §6.8.7: periodic packets every max(our Desired Min TX, the peer's
//     Required Min RX), less 0–25 % jitter (10–25 % when Detect Mult is
//     1), none when the peer's Required Min RX is 0; a packet at once on
//     every state change.
//
// Left out: authentication (packets with the A bit are dropped), demand
// mode (the D bit is ignored and never sent), the echo function (Required
// Min Echo RX is sent as 0), multihop (RFC 5883), and AdminDown as this
// side's state (the agent removes a session rather than disabling it).
//
// One goroutine (Manager.Run) drives every session from a heap of
// deadlines with one timer, on the time package's clock, so the tests run
// whole handshakes and detection times in testing/synctest's virtual time.
package bfd
