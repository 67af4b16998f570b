package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runBinary runs the built uvxlan with args and extra environment and
// returns its exit status and stderr.
func runBinary(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(uvxlanBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.String()
	}
	t.Fatalf("uvxlan %v: %v", args, err)
	return 0, ""
}

// Every bad flag value is a one-line error naming the flag, exit status 2,
// and nothing is created. All cases bind to loopback only, and each has one
// bad value, so no agent ever starts in the root namespace.
func TestBadFlagsExit2(t *testing.T) {
	// A UDP port that is taken, for the "port in use" case.
	busy, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := strconv.Itoa(busy.LocalAddr().(*net.UDPAddr).Port)

	base := []string{"run", "--local", "127.0.0.1", "--mtu", "1400", "--control", t.TempDir() + "/c.sock", "--dev", "uvxbadflag", "--gossip-key-file", testKeyFile}
	tests := []struct {
		desc string
		args []string
		env  []string
		flag string
	}{
		{"VNI zero", []string{"--vni", "0"}, nil, "--vni"},
		{"VNI over 24 bits", []string{"--vni", "16777216"}, nil, "--vni"},
		{"VNI not a number", []string{"--vni", "ten"}, nil, "vni"},
		{"VNI from the environment", nil, []string{"UVXLAN_VNI=0"}, "--vni"},
		{"port zero", []string{"--port", "0"}, nil, "--port"},
		{"port too big", []string{"--port", "70000"}, nil, "--port"},
		{"port in use", []string{"--port", busyPort}, nil, "--port"},
		{"address without prefix length", []string{"--address", "10.42.0.1"}, nil, "--address"},
		{"MAC malformed", []string{"--mac", "zz:00:00:00:00:01"}, nil, "--mac"},
		{"MAC multicast", []string{"--mac", "01:00:5e:00:00:01"}, nil, "--mac"},
		{"peer not an address", []string{"--peer", "host-b"}, nil, "--peer"},
		{"peer port zero", []string{"--peer", "198.18.0.2:0"}, nil, "--peer"},
		{"MTU too small", []string{"--mtu", "10"}, nil, "--mtu"},
		{"underlay MTU too small", []string{"--underlay-mtu", "100"}, nil, "--underlay-mtu"},
		{"underlay MTU too big", nil, []string{"UVXLAN_UNDERLAY_MTU=70000"}, "--underlay-mtu"},
		{"source port range reversed", []string{"--src-port-range", "50000-49000"}, nil, "--src-port-range"},
		{"source port range too wide", []string{"--src-port-range", "40000-50000"}, nil, "--src-port-range"},
		{"ageing zero", []string{"--ageing", "0s"}, nil, "--ageing"},
		{"fdb-max zero", []string{"--fdb-max", "0"}, nil, "--fdb-max"},
		{"max-endpoints zero", []string{"--max-endpoints", "0"}, nil, "--max-endpoints"},
		{"max-endpoints too big", nil, []string{"UVXLAN_MAX_ENDPOINTS=65537"}, "--max-endpoints"},
		{"device name too long", []string{"--dev", "averyveryverylongname"}, nil, "--dev"},
		{"local not on this host", []string{"--local", "198.19.255.254"}, nil, "--local"},
		{"network not a CIDR", []string{"--network", "10.244.0.0"}, nil, "--network"},
		{"network IPv6", []string{"--network", "fd00::/48"}, nil, "--network"},
		{"network host bits", []string{"--network", "10.244.1.0/16"}, nil, "--network"},
		{"subnet-len not longer than the network", []string{"--network", "10.244.0.0/24"}, nil, "--subnet-len"},
		{"subnet-len 31", []string{"--network", "10.244.0.0/16", "--subnet-len", "31"}, nil, "--subnet-len"},
		{"subnet-min outside the network", []string{"--network", "10.244.0.0/16", "--subnet-min", "10.245.0.0"}, nil, "--subnet-min"},
		{"subnet-max not aligned", []string{"--network", "10.244.0.0/16", "--subnet-max", "10.244.9.7"}, nil, "--subnet-max"},
		{"subnet-min above subnet-max", []string{"--network", "10.244.0.0/16", "--subnet-min", "10.244.9.0", "--subnet-max", "10.244.8.0"}, nil, "--subnet-min"},
		{"lease-ttl zero", []string{"--network", "10.244.0.0/16", "--lease-ttl", "0s"}, nil, "--lease-ttl"},
		{"network with address", []string{"--network", "10.244.0.0/16", "--address", "10.42.0.1/24"}, nil, "--address"},
		{"ip-masq without network", []string{"--ip-masq"}, nil, "--network"},
		{"subnet without network", []string{"--subnet", "10.0.0.0/16"}, nil, "--network"},
		{"subnet not a subnet", []string{"--network", "10.0.0.0/8", "--subnet-len", "16", "--subnet", "10.0.0.0/24"}, nil, "--subnet"},
		{"subnet outside the network", []string{"--network", "10.0.0.0/8", "--subnet-len", "16", "--subnet", "11.0.0.0/16"}, nil, "--subnet"},
		{"route default", []string{"--network", "10.0.0.0/8", "--route", "0.0.0.0/0"}, nil, "--route"},
		{"route outside the network", nil, []string{"UVXLAN_NETWORK=10.0.0.0/8", "UVXLAN_ROUTE=192.168.0.1/32"}, "--route"},
		{"route as large as a subnet", []string{"--network", "10.0.0.0/8", "--subnet-len", "16", "--route", "10.5.0.0/16"}, nil, "--route"},
		{"route inside the own subnet", []string{"--network", "10.0.0.0/8", "--subnet-len", "16", "--subnet", "10.0.0.0/16", "--route", "10.0.0.1/32"}, nil, "--route"},
		{"route not a CIDR", []string{"--network", "10.0.0.0/8", "--route", "10.0.0.1"}, nil, "--route"},
		{"kubeconfig without kube-subnet-mgr", []string{"--kubeconfig", "/etc/k.conf"}, nil, "--kube-subnet-mgr"},
		{"kube-subnet-mgr without network", []string{"--kube-subnet-mgr", "--name", "n", "--kubeconfig", "/etc/k.conf"}, nil, "--network"},
		{"kube-subnet-mgr with subnet-len", []string{"--kube-subnet-mgr", "--network", "10.244.0.0/16", "--subnet-len", "25", "--name", "n"}, nil, "--subnet-len"},
		{"kube-subnet-mgr with a reservation", []string{"--kube-subnet-mgr", "--network", "10.244.0.0/16", "--subnet", "10.244.3.0/24", "--name", "n"}, nil, "--subnet"},
		{"kube-subnet-mgr with a route", []string{"--kube-subnet-mgr", "--network", "10.244.0.0/16", "--route", "10.244.0.1/32", "--name", "n"}, nil, "--route"},
		{"kube-subnet-mgr without a kubeconfig outside a pod", []string{"--kube-subnet-mgr", "--network", "10.244.0.0/16", "--name", "n"}, nil, "--kubeconfig"},
		{"kube-subnet-mgr without a node name", []string{"--kube-subnet-mgr", "--network", "10.244.0.0/16", "--kubeconfig", "/etc/k.conf"}, []string{"NODE_NAME="}, "NODE_NAME"},
		{"kube-subnet-mgr with a kubeconfig that is not there", []string{"--kube-subnet-mgr", "--network", "10.244.0.0/16", "--name", "n", "--kubeconfig", "/nonexistent/k.conf"}, nil, "--kubeconfig"},
		{"kube-subnet-mgr without gossip", []string{"--kube-subnet-mgr", "--network", "10.244.0.0/16", "--name", "n", "--gossip=false"}, nil, "--gossip"},
		{"network from the environment", nil, []string{"UVXLAN_NETWORK=banana"}, "--network"},
		{"network6 IPv4", []string{"--network6", "10.244.0.0/16"}, nil, "--network6"},
		{"network6 not a CIDR", []string{"--network6", "fd00:244::"}, nil, "--network6"},
		{"network6 IPv4-mapped", []string{"--network6", "::ffff:10.0.0.0/104"}, nil, "--network6"},
		{"network6 host bits", []string{"--network6", "fd00:244::1/48"}, nil, "--network6"},
		{"network6 not larger than its subnets", []string{"--network6", "fd00:244::/64"}, nil, "--subnet-len6"},
		{"subnet-len6 127", []string{"--network6", "fd00:244::/48", "--subnet-len6", "127"}, nil, "--subnet-len6"},
		{"subnet-len6 of more than 2^32 subnets", []string{"--network6", "fd00::/16", "--subnet-len6", "64"}, nil, "--subnet-len6"},
		{"subnet-len6 without network6", []string{"--network", "10.244.0.0/16", "--subnet-len6", "80"}, nil, "--network6"},
		{"subnet6 without network6", []string{"--network", "10.244.0.0/16", "--subnet6", "fd00:244::/64"}, nil, "--network6"},
		{"subnet6 outside network6", []string{"--network6", "fd00:244::/48", "--subnet6", "fd00:245::/64"}, nil, "--subnet6"},
		{"subnet6 IPv4", []string{"--network6", "fd00:244::/48", "--subnet6", "10.244.0.0/24"}, nil, "--subnet6"},
		{"subnet with network6 only", []string{"--network6", "fd00:244::/48", "--subnet", "10.244.0.0/24"}, nil, "--network"},
		{"IPv6 route without network6", []string{"--network", "10.0.0.0/8", "--route", "fd00:244::1/128"}, nil, "--network6"},
		{"IPv4 route without network", []string{"--network6", "fd00:244::/48", "--route", "10.0.0.1/32"}, nil, "--network"},
		{"IPv6 route outside network6", []string{"--network6", "fd00:244::/48", "--route", "fd00:245::1/128"}, nil, "--route"},
		{"network covers the underlay", []string{"--network", "127.0.0.0/8", "--subnet-len", "16"}, nil, "--network"},
		{"network6 covers the underlay", []string{"--local", "::1", "--network6", "::/104", "--subnet-len6", "120"}, nil, "--network6"},
		{"network6 from the environment", nil, []string{"UVXLAN_NETWORK6=10.0.0.0/8"}, "--network6"},
		{"kube-subnet-mgr with subnet-len6", []string{"--kube-subnet-mgr", "--network6", "fd00:244::/48", "--subnet-len6", "80", "--name", "n"}, nil, "--subnet-len6"},
		{"queues zero", []string{"--queues", "0"}, nil, "--queues"},
		{"queues too many", []string{"--queues", "65"}, nil, "--queues"},
		{"queues without offload", []string{"--queues", "2", "--offload=false"}, nil, "--queues"},
		{"probe-interval negative", []string{"--probe-interval", "-1s"}, nil, "--probe-interval"},
		{"busy-poll too long", []string{"--busy-poll", "5ms"}, nil, "--busy-poll"},
		{"busy-poll negative", []string{"--busy-poll", "-1us"}, nil, "--busy-poll"},
		{"probe-retries zero", []string{"--probe-retries", "0"}, nil, "--probe-retries"},
		{"bfd not a CIDR", []string{"--bfd", "banana"}, nil, "--bfd"},
		{"bfd from the environment", nil, []string{"UVXLAN_BFD=10.42.0.0/33"}, "--bfd"},
		{"bfd without a source", []string{"--bfd", "10.42.0.0/24"}, nil, "--bfd-source"},
		{"bfd-source not an IP", []string{"--bfd", "10.42.0.0/24", "--bfd-source", "h1"}, nil, "--bfd-source"},
		{"bfd-source multicast", []string{"--bfd", "10.42.0.0/24", "--bfd-source", "224.0.0.1"}, nil, "--bfd-source"},
		{"bfd-source without bfd", []string{"--bfd-source", "10.42.0.1"}, nil, "--bfd"},
		{"bfd-interval zero", []string{"--bfd", "10.42.0.0/24", "--address", "10.42.0.1/24", "--bfd-interval", "0s"}, nil, "--bfd-interval"},
		{"bfd-interval too long", []string{"--bfd", "10.42.0.0/24", "--address", "10.42.0.1/24", "--bfd-interval", "2m"}, nil, "--bfd-interval"},
		{"bfd-multiplier zero", []string{"--bfd", "10.42.0.0/24", "--address", "10.42.0.1/24", "--bfd-multiplier", "0"}, nil, "--bfd-multiplier"},
		{"bfd-multiplier too big", nil, []string{"UVXLAN_BFD=10.42.0.0/24", "UVXLAN_ADDRESS=10.42.0.1/24", "UVXLAN_BFD_MULTIPLIER=256"}, "--bfd-multiplier"},
		{"state-dir a file", []string{"--state-dir", "/dev/null"}, nil, "--state-dir"},
		{"state-dir not creatable", []string{"--state-dir", "/proc/uvxlan-state"}, nil, "--state-dir"},
		{"unknown flag", []string{"--bogus"}, nil, "bogus"},
		{"stray argument", []string{"extra"}, nil, "no arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			code, stderr := runBinary(t, tc.env, append(append([]string(nil), base...), tc.args...)...)
			if code != exitUsage {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tc.flag) {
				t.Errorf("stderr does not name %s:\n%s", tc.flag, stderr)
			}
			if _, err := net.InterfaceByName("uvxbadflag"); err == nil {
				t.Errorf("a TAP was created despite the bad flag")
			}
		})
	}
}

// A state directory that other users could write, an identity key they
// could read, or a key log through a symbolic link: exit status 2 with the
// path named, before any TAP is made (one bad value per case, loopback
// only, as above).
func TestUnsafeStateExit2(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: chown to another user needs root")
	}
	const nobody = 65534
	dir := t.TempDir()
	mkdir := func(name string, mode os.FileMode) string {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		return d
	}
	open := mkdir("open", 0o777)
	theirs := mkdir("theirs", 0o755)
	os.Chown(theirs, nobody, nobody)
	withKey := mkdir("with-key", 0o700)
	key := filepath.Join(withKey, "encrypt.key")
	os.WriteFile(key, []byte("JQ8fA7cU3M2Qyb9H1Jm6l2QKQm9eW4Zz3jR0xw3vUko=\n"), 0o644)
	os.Chmod(key, 0o644)
	os.Chown(key, nobody, nobody)
	target := filepath.Join(dir, "precious")
	os.WriteFile(target, []byte("precious\n"), 0o600)
	link := filepath.Join(dir, "keys")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}

	// Ports of their own (a started agent would hold them meanwhile).
	port := func() string {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return strconv.Itoa(c.LocalAddr().(*net.UDPAddr).Port)
	}
	base := []string{"run", "--local", "127.0.0.1", "--port", port(), "--gossip-port", port(), "--mtu", "1400",
		"--control", filepath.Join(dir, "c.sock"), "--dev", "uvxbadstate", "--gossip-key-file", testKeyFile}
	for _, tc := range []struct {
		desc string
		args []string
		want []string
	}{
		{"world-writable state directory", []string{"--state-dir", open}, []string{"--state-dir", open, "is writable by group or others (mode drwxrwxrwx)"}},
		{"another user's state directory", []string{"--state-dir", theirs}, []string{"--state-dir", theirs, "belongs to uid 65534"}},
		{"another user's identity key, 0644", []string{"--state-dir", withKey, "--encrypt"}, []string{"--state-dir", key, "belongs to uid 65534"}},
		{"a key log through a symbolic link", []string{"--state-dir", mkdir("good", 0o700), "--encrypt", "--encrypt-keylog", link}, []string{"--encrypt-keylog", link, "is a symbolic link"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			// An agent that starts instead is stopped (SIGTERM) after 20 s.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, uvxlanBin, append(append([]string(nil), base...), tc.args...)...)
			cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
			cmd.WaitDelay = 10 * time.Second
			var buf bytes.Buffer
			cmd.Stderr = &buf
			cmd.Run()
			code, stderr := cmd.ProcessState.ExitCode(), buf.String()
			if ctx.Err() != nil {
				t.Errorf("the agent started and ran for 20 s")
			}
			if code != exitUsage {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, exitUsage, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr)
				}
			}
			if _, err := net.InterfaceByName("uvxbadstate"); err == nil {
				t.Errorf("a TAP was created")
			}
		})
	}
	if b, _ := os.ReadFile(target); string(b) != "precious\n" {
		t.Errorf("the key log's link target was written: %q", b)
	}
}

func TestClientWithoutAgent(t *testing.T) {
	t.Parallel()
	code, stderr := runBinary(t, nil, "stats", "--control", t.TempDir()+"/none.sock")
	if code != exitError || !strings.Contains(stderr, "no agent answers") {
		t.Errorf("exit %d, stderr %q: want 1 and a message that no agent answers", code, stderr)
	}
}

func TestParsePeer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"198.18.0.2", "198.18.0.2:4789", true},
		{"198.18.0.2:8472", "198.18.0.2:8472", true},
		{"[2001:db8::1]:4789", "[2001:db8::1]:4789", true},
		{"2001:db8::1", "[2001:db8::1]:4789", true},
		{"::ffff:198.18.0.2", "198.18.0.2:4789", true},
		{"0.0.0.0", "", false},
		{"224.0.0.1", "", false},
		{"198.18.0.2:0", "", false},
		{"host", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		got, err := parsePeer(tc.in, 4789)
		if (err == nil) != tc.ok || (tc.ok && got.String() != tc.want) {
			t.Errorf("parsePeer(%q) = %v, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestParsePortRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in     string
		lo, hi uint16
		ok     bool
	}{
		{"49152-49159", 49152, 49159, true},
		{"5000", 5000, 5000, true},
		{"1-64", 1, 64, true},
		{"1-65", 0, 0, false},
		{"9-8", 0, 0, false},
		{"0-5", 0, 0, false},
		{"a-b", 0, 0, false},
	}
	for _, tc := range tests {
		lo, hi, err := parsePortRange(tc.in)
		if (err == nil) != tc.ok || lo != tc.lo || hi != tc.hi {
			t.Errorf("parsePortRange(%q) = %d, %d, %v; want %d, %d ok=%v", tc.in, lo, hi, err, tc.lo, tc.hi, tc.ok)
		}
	}
}

// FuzzReadKeyring: a keyring file either yields keys of AES sizes, or an
// error; it never panics.
func FuzzReadKeyring(f *testing.F) {
	f.Add(`["MDEyMzQ1Njc4OWFiY2RlZg=="]`)
	f.Add(`[]`)
	f.Add(`["short"]`)
	f.Add(`{"a": 1}`)
	f.Fuzz(func(t *testing.T, text string) {
		path := t.TempDir() + "/keyring.json"
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		keys, err := readKeyring(path)
		if err != nil {
			return
		}
		if len(keys) == 0 {
			t.Fatal("no error and no key")
		}
		for _, k := range keys {
			if n := len(k); n != 16 && n != 24 && n != 32 {
				t.Fatalf("key of %d bytes accepted", n)
			}
		}
	})
}

// Gossip needs a key: without one, with a key file that cannot be used, or
// with --gossip=false and something that needs gossip, run exits 2 naming
// the flag, and the no-key error says how to make a key. Loopback only;
// every case fails before an agent starts.
func TestGossipKeyFlags(t *testing.T) {
	dir := t.TempDir()
	empty, bad, short := dir+"/empty.key", dir+"/bad.key", dir+"/short.key"
	for path, content := range map[string]string{empty: "\n", bad: "not base64 at all!\n", short: "c2hvcnQ=\n"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	base := []string{"run", "--local", "127.0.0.1", "--mtu", "1400", "--control", dir + "/c.sock", "--dev", "uvxbadkey"}
	tests := []struct {
		desc string
		args []string
		want []string
	}{
		{"no key", nil, []string{"--gossip-key-file", "uvxlan keygen", "--insecure-gossip", "--gossip=false"}},
		{"key file missing", []string{"--gossip-key-file", dir + "/none.key"}, []string{"--gossip-key-file", "no such file"}},
		{"key file empty", []string{"--gossip-key-file", empty}, []string{"--gossip-key-file", "empty", "uvxlan keygen"}},
		{"key file not base64", []string{"--gossip-key-file", bad}, []string{"--gossip-key-file", "not valid base64"}},
		{"key file too short", []string{"--gossip-key-file", short}, []string{"--gossip-key-file", "16, 24 or 32"}},
		{"--join without gossip", []string{"--gossip=false", "--join", "127.0.0.2"}, []string{"--join", "--gossip=false"}},
		{"--network without gossip", []string{"--gossip=false", "--network", "10.244.0.0/16"}, []string{"--network", "--gossip=false"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			// An agent that starts instead is stopped (SIGTERM) after 20 s.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, uvxlanBin, append(append([]string(nil), base...), tc.args...)...)
			cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
			cmd.WaitDelay = 10 * time.Second
			var buf bytes.Buffer
			cmd.Stderr = &buf
			cmd.Run()
			code, stderr := cmd.ProcessState.ExitCode(), buf.String()
			if ctx.Err() != nil {
				t.Errorf("the agent started and ran for 20 s")
			}
			if code != exitUsage {
				t.Errorf("exit status %d, want %d; stderr:\n%s", code, exitUsage, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, "bm90IGJhc2U2NCBhdCBhbGwh") || strings.Contains(stderr, "c2hvcnQ=") {
				t.Errorf("stderr repeats the key:\n%s", stderr)
			}
			if _, err := net.InterfaceByName("uvxbadkey"); err == nil {
				t.Errorf("a TAP was created despite the bad flag")
			}
		})
	}
}

// keygen prints a new 32-byte base64 key each time, which --gossip-key-file
// accepts.
func TestKeygen(t *testing.T) {
	t.Parallel()
	var keys []string
	for range 2 {
		out, err := exec.Command(uvxlanBin, "keygen").Output()
		if err != nil {
			t.Fatal(err)
		}
		k, err := readKeyFileBytes(t, out)
		if err != nil || len(k) != 32 {
			t.Errorf("keygen printed %q: %d bytes, %v; want a 32-byte base64 key", out, len(k), err)
		}
		keys = append(keys, string(out))
	}
	if keys[0] == keys[1] {
		t.Errorf("keygen printed the same key twice: %q", keys[0])
	}
	if code, stderr := runBinary(t, nil, "keygen", "extra"); code != exitUsage {
		t.Errorf("keygen extra: exit %d, want %d: %s", code, exitUsage, stderr)
	}
}

// readKeyFileBytes reads a key through readKeyFile, as run would.
func readKeyFileBytes(t *testing.T, b []byte) ([]byte, error) {
	path := t.TempDir() + "/k"
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return readKeyFile(path)
}
