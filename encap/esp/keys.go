package esp

import (
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// KeyLen is the size of an X25519 public or private key.
const KeyLen = 32

// hkdfSalt names the construction and its version: keys for anything else
// never come out of the same inputs.
const hkdfSalt = "uvxlan ESP-in-UDP AES-128-GCM X25519 v1"

// NewKey makes a new X25519 private key.
func NewKey() (*ecdh.PrivateKey, error) { return ecdh.X25519().GenerateKey(rand.Reader) }

// ParseKey reads a 32-byte X25519 private key.
func ParseKey(b []byte) (*ecdh.PrivateKey, error) { return ecdh.X25519().NewPrivateKey(b) }

// ParsePublic reads a 32-byte X25519 public key.
func ParsePublic(b []byte) (*ecdh.PublicKey, error) { return ecdh.X25519().NewPublicKey(b) }

// Ends are the keys of one direction of a pair, seen from either side: the
// sender's and the receiver's static (identity) and ephemeral public keys,
// and the private halves this side holds (its static and ephemeral: the
// sender's when it derives its outbound SA, the receiver's for its inbound).
type Ends struct {
	SenderStatic, SenderEph     *ecdh.PublicKey
	ReceiverStatic, ReceiverEph *ecdh.PublicKey
	Static, Eph                 *ecdh.PrivateKey // ours
	Outbound                    bool             // we are the sender
}

// Derive makes the SA of one direction: HKDF-SHA256 over
// X25519(ephemerals) ‖ X25519(statics), salt hkdfSalt, info the four public
// keys (sender static, receiver static, sender ephemeral, receiver
// ephemeral); out of it come the AES key, the GCM salt and the SPI. Both
// sides derive the same SA. peer is the other end's VTEP address.
func Derive(k Ends, peer netip.Addr) (*SA, error) {
	otherStatic, otherEph := k.ReceiverStatic, k.ReceiverEph
	if !k.Outbound {
		otherStatic, otherEph = k.SenderStatic, k.SenderEph
	}
	ee, err := k.Eph.ECDH(otherEph)
	if err != nil {
		return nil, fmt.Errorf("esp: ephemeral X25519: %w", err)
	}
	ss, err := k.Static.ECDH(otherStatic)
	if err != nil {
		return nil, fmt.Errorf("esp: static X25519: %w", err)
	}
	ikm := append(ee, ss...)
	info := make([]byte, 0, 4*KeyLen)
	for _, p := range []*ecdh.PublicKey{k.SenderStatic, k.ReceiverStatic, k.SenderEph, k.ReceiverEph} {
		info = append(info, p.Bytes()...)
	}
	okm, err := hkdf.Key(sha256.New, ikm, []byte(hkdfSalt), string(info), keyLen+saltLen+4)
	clear(ikm)
	clear(ee)
	clear(ss)
	if err != nil {
		return nil, err
	}
	var key [keyLen]byte
	var salt [saltLen]byte
	copy(key[:], okm)
	copy(salt[:], okm[keyLen:])
	spi := binary.BigEndian.Uint32(okm[keyLen+saltLen:])&^spiClear | spiMark
	clear(okm)
	return newSA(spi, peer, key, salt)
}

// LogKey writes sa to a key log: one line Wireshark's ESP SA table
// (esp_sa UAT) takes, for the direction from src to dst:
//
//	"IPv4","198.18.0.1","198.18.0.2","0x8a1b2c3d","AES-GCM with 16 octet ICV [RFC4106]","0x<key><salt>","NULL","",
//
// See KeyLogUAT for the tshark command line.
func LogKey(w io.Writer, sa *SA, src, dst netip.Addr) error {
	proto := "IPv4"
	if src.Is6() && !src.Is4In6() {
		proto = "IPv6"
	}
	_, err := fmt.Fprintf(w, "%q,%q,%q,\"0x%08x\",\"AES-GCM with 16 octet ICV [RFC4106]\",\"0x%s%s\",\"NULL\",\"\"\n",
		proto, src.Unmap().String(), dst.Unmap().String(), sa.SPI, hex.EncodeToString(sa.key[:]), hex.EncodeToString(sa.salt[:]))
	return err
}

// TsharkArgs returns the tshark options that decrypt ESP on the VXLAN port
// with the SAs of a key log (its lines, as LogKey writes them): decode the
// port as UDP-encapsulated ESP and fill the esp_sa table.
func TsharkArgs(keyLog string, port uint16) []string {
	args := []string{"-d", fmt.Sprintf("udp.port==%d,udpencap", port), "-o", "esp.enable_encryption_decode:TRUE"}
	for _, l := range strings.Split(keyLog, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			args = append(args, "-o", "uat:esp_sa:"+l)
		}
	}
	return args
}
