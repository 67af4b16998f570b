package routed

// IP masquerade for the routed overlay (--ip-masq), with flannel's semantics.
//
// In routed mode a cluster network (say 10.244.0.0/16, and fd00:244::/48 in
// dual stack) is cut into per-node subnets, and the overlay carries traffic
// between them with the endpoints' own addresses. Those addresses mean
// nothing outside the cluster, so traffic that leaves it must leave with the
// node's address instead, for each family with a cluster network:
//
//   - source in the cluster network, destination in it: never NATed
//     (overlay traffic keeps its addresses end to end);
//   - source in the cluster network, destination multicast (224.0.0.0/4,
//     ff00::/8): never NATed, as flannel does;
//   - source in the cluster network, any other destination: MASQUERADE, that
//     is source NAT to the address of the interface the packet leaves by;
//   - anything else: not ours, untouched.
//
// The rules live in a place of their own, named after the agent's tag (its
// TAP name), so two agents on one host do not collide and nobody else's rules
// are touched:
//
//   - nftables: table ip uvxlan-<tag> (IPv4 only), or inet uvxlan-<tag>
//     (an IPv6 network, with or without an IPv4 one), with one chain,
//     postrouting, of type nat at hook postrouting, priority srcnat.
//     Install replaces the whole table in one transaction (`nft -f -`: add
//     table; delete table, of both families; table {...}), so a crashed
//     agent's table is replaced, not doubled, also when it ran with the
//     other family, and there is no moment without rules. nftables 1.0.6
//     (Debian 12) has no `destroy table`, hence the add-then-delete idiom.
//   - iptables: chain UVXLAN-MASQ-<tag> in table nat of iptables (IPv4)
//     and of ip6tables (IPv6),
//     filled atomically with `iptables-restore --noflush` (declaring the
//     chain flushes it), and one jump to it appended to POSTROUTING after an
//     `-C` check. The jump matches everything, and the chain matches the
//     network, so a leftover jump from an agent with another network is
//     reused, never stale. The tag keeps its case in the chain name: upper-
//     casing it would let uvx0 and UVX0 collide.
//
// Both backends are driven through their command-line tools; errors carry the
// command line and its standard error.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
)

// Backend names, as installMasq takes them and masqRules.Backend reports them.
const (
	masqNftables = "nftables"
	masqIptables = "iptables"
)

// maxMasqTag is the longest tag: an interface name (IFNAMSIZ-1), which also
// keeps UVXLAN-MASQ-<tag> within iptables' 28-character chain names.
const maxMasqTag = 15

// masqRules is the installed NAT configuration of one agent: what
// installMasq put in place, and enough to remove exactly that. Its methods
// are safe to call more than once but not concurrently with each other or
// with an installMasq for the same tag.
type masqRules struct {
	backend  string         // masqNftables or masqIptables
	networks []netip.Prefix // masked; one IPv4, one IPv6 or one of each, IPv4 first
	tag      string
}

// installMasq installs the masquerade rules for the cluster networks (an
// IPv4 prefix, an IPv6 prefix, or one of each), tagging them with tag (the agent's TAP name: letters,
// digits, '.', '_' and '-', at most 15 characters). backend "" picks nftables
// when the nft binary is on PATH and works, else iptables when it is on PATH (and ip6tables, for an IPv6 network), else it fails saying neither was found; "nftables"
// or "iptables" forces one. Installing again with the same tag replaces what was there, also when it was left behind by an agent
// that crashed, so there is always exactly one copy. It blocks while the
// commands run; ctx bounds them.
func installMasq(ctx context.Context, networks []netip.Prefix, tag, backend string) (*masqRules, error) {
	m := &masqRules{tag: tag}
	var v4, v6 int
	for _, n := range networks {
		switch {
		case !n.IsValid() || n.Addr().Is4In6() || n.Addr().Zone() != "":
			return nil, fmt.Errorf("ip-masq: invalid cluster network %s: need an IPv4 or IPv6 prefix", n)
		case n.Addr().Is4():
			v4++
		default:
			v6++
		}
		m.networks = append(m.networks, n.Masked())
	}
	if len(networks) == 0 || v4 > 1 || v6 > 1 {
		return nil, fmt.Errorf("ip-masq: cluster networks %v: need one IPv4 prefix, one IPv6 prefix or one of each", networks)
	}
	slices.SortFunc(m.networks, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	if err := checkMasqTag(tag); err != nil {
		return nil, err
	}
	switch backend {
	case "":
		b, err := pickMasqBackend(ctx, m.iptBinaries())
		if err != nil {
			return nil, err
		}
		m.backend = b
	case masqNftables, masqIptables:
		m.backend = backend
	default:
		return nil, fmt.Errorf("ip-masq: unknown backend %q (want %q or %q)", backend, masqNftables, masqIptables)
	}
	var err error
	if m.backend == masqNftables {
		_, err = runMasqCmd(ctx, m.nftInstallScript(), "nft", "-f", "-")
	} else {
		err = m.installIptables(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("ip-masq: install %s rules for %v: %w", m.backend, m.networks, err)
	}
	return m, nil
}

// Remove deletes what installMasq installed: the nftables table, or the
// iptables jump and chain. What is already gone is not an error, so calling
// it twice (or on a nil *masqRules) is fine. It blocks while the commands
// run; ctx bounds them.
func (m *masqRules) Remove(ctx context.Context) error {
	if m == nil {
		return nil
	}
	var err error
	if m.backend == masqNftables {
		_, err = runMasqCmd(ctx, m.nftRemoveScript(), "nft", "-f", "-")
	} else {
		err = m.removeIptables(ctx)
	}
	if err != nil {
		return fmt.Errorf("ip-masq: remove %s rules for %v: %w", m.backend, m.networks, err)
	}
	return nil
}

// Backend reports "nftables" or "iptables".
func (m *masqRules) Backend() string { return m.backend }

// checkMasqTag accepts tags that are valid, unquoted, in both an nftables
// table name and an iptables chain name.
func checkMasqTag(tag string) error {
	if tag == "" || len(tag) > maxMasqTag {
		return fmt.Errorf("ip-masq: tag %q: need 1 to %d characters", tag, maxMasqTag)
	}
	for _, c := range tag {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("ip-masq: tag %q: only letters, digits, '.', '_' and '-' are allowed", tag)
		}
	}
	return nil
}

// pickMasqBackend returns nftables when nft is on PATH and can list the
// tables (the kernel has nf_tables and we may use it), else iptables when
// each of ipts (and its -restore) is on PATH.
func pickMasqBackend(ctx context.Context, ipts []string) (string, error) {
	_, nftErr := exec.LookPath("nft")
	if nftErr == nil {
		if _, nftErr = runMasqCmd(ctx, "", "nft", "list", "tables"); nftErr == nil {
			return masqNftables, nil
		}
	}
	var iptErr error
	for _, ipt := range ipts {
		if _, iptErr = exec.LookPath(ipt); iptErr == nil {
			_, iptErr = exec.LookPath(ipt + "-restore")
		}
		if iptErr != nil {
			break
		}
	}
	if iptErr == nil {
		return masqIptables, nil
	}
	return "", fmt.Errorf("ip-masq: neither nftables nor %s was found (nft: %v; %v); install the nftables or iptables package",
		strings.Join(ipts, " and "), nftErr, iptErr)
}

// multicast and multicast6 are the destination ranges that are never NATed.
var (
	multicast  = netip.MustParsePrefix("224.0.0.0/4")
	multicast6 = netip.MustParsePrefix("ff00::/8")
)

// multicastOf is the multicast range of n's family.
func multicastOf(n netip.Prefix) netip.Prefix {
	if n.Addr().Is4() {
		return multicast
	}
	return multicast6
}

// nftables

// nftFamily is the table family with IPv4 only, nftFamilyInet with IPv6.
const (
	nftFamily     = "ip"
	nftFamilyInet = "inet"
)

func (m *masqRules) nftTable() string { return "uvxlan-" + m.tag }

// nftTableFamily is the family of our table: ip with IPv4 only, else inet.
func (m *masqRules) nftTableFamily() string {
	for _, n := range m.networks {
		if n.Addr().Is6() {
			return nftFamilyInet
		}
	}
	return nftFamily
}

// nftRemoveScript deletes the table of both families, whether or not they
// exist.
func (m *masqRules) nftRemoveScript() string {
	var b strings.Builder
	for _, f := range []string{nftFamily, nftFamilyInet} {
		fmt.Fprintf(&b, "add table %[1]s %[2]s\ndelete table %[1]s %[2]s\n", f, m.nftTable())
	}
	return b.String()
}

// nftInstallScript replaces the table in one transaction (dual stack here;
// with IPv4 only the table is "ip uvxlan-uvx0", without the ip6 lines):
//
//	add table ip uvxlan-uvx0
//	delete table ip uvxlan-uvx0
//	add table inet uvxlan-uvx0
//	delete table inet uvxlan-uvx0
//	table inet uvxlan-uvx0 {
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return
//			ip saddr 10.244.0.0/16 ip daddr 224.0.0.0/4 return
//			ip saddr 10.244.0.0/16 masquerade
//			ip6 saddr fd00:244::/48 ip6 daddr fd00:244::/48 return
//			ip6 saddr fd00:244::/48 ip6 daddr ff00::/8 return
//			ip6 saddr fd00:244::/48 masquerade
//		}
//	}
func (m *masqRules) nftInstallScript() string {
	var b strings.Builder
	b.WriteString(m.nftRemoveScript())
	fmt.Fprintf(&b, "table %s %s {\n", m.nftTableFamily(), m.nftTable())
	b.WriteString("\tchain postrouting {\n")
	b.WriteString("\t\ttype nat hook postrouting priority srcnat; policy accept;\n")
	for _, n := range m.networks {
		f := "ip"
		if n.Addr().Is6() {
			f = "ip6"
		}
		fmt.Fprintf(&b, "\t\t%s saddr %s %s daddr %s return\n", f, n, f, n)
		fmt.Fprintf(&b, "\t\t%s saddr %s %s daddr %s return\n", f, n, f, multicastOf(n))
		fmt.Fprintf(&b, "\t\t%s saddr %s masquerade\n", f, n)
	}
	b.WriteString("\t}\n}\n")
	return b.String()
}

// iptables

// iptables and ip6tables are the binaries that edit the IPv4 and the IPv6
// tables.
const (
	iptables  = "iptables"
	ip6tables = "ip6tables"
)

// iptBinary is the binary of n's family.
func iptBinary(n netip.Prefix) string {
	if n.Addr().Is4() {
		return iptables
	}
	return ip6tables
}

// iptBinaries are the binaries of m's networks.
func (m *masqRules) iptBinaries() []string {
	var out []string
	for _, n := range m.networks {
		out = append(out, iptBinary(n))
	}
	return out
}

func (m *masqRules) iptChain() string { return "UVXLAN-MASQ-" + m.tag }

// iptJump is the POSTROUTING rule that sends everything to our chain.
func (m *masqRules) iptJump() []string {
	return []string{"POSTROUTING", "-m", "comment", "--comment", "uvxlan ip-masq " + m.tag, "-j", m.iptChain()}
}

// iptRestoreInput declares (and so creates or flushes) the chain and fills
// it with the rules of network n, for iptables-restore --noflush (or
// ip6tables-restore, for an IPv6 n):
//
//	*nat
//	:UVXLAN-MASQ-uvx0 - [0:0]
//	-A UVXLAN-MASQ-uvx0 -s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN
//	-A UVXLAN-MASQ-uvx0 -s 10.244.0.0/16 -d 224.0.0.0/4 -j RETURN
//	-A UVXLAN-MASQ-uvx0 -s 10.244.0.0/16 -j MASQUERADE
//	COMMIT
func (m *masqRules) iptRestoreInput(n netip.Prefix) string {
	c := m.iptChain()
	var b strings.Builder
	b.WriteString("*nat\n")
	fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	fmt.Fprintf(&b, "-A %s -s %s -d %s -j RETURN\n", c, n, n)
	fmt.Fprintf(&b, "-A %s -s %s -d %s -j RETURN\n", c, n, multicastOf(n))
	fmt.Fprintf(&b, "-A %s -s %s -j MASQUERADE\n", c, n)
	b.WriteString("COMMIT\n")
	return b.String()
}

// installIptables installs the chain and the jump of each network, with
// the binary of its family.
func (m *masqRules) installIptables(ctx context.Context) error {
	for _, n := range m.networks {
		ipt := iptBinary(n)
		if _, err := runMasqCmd(ctx, m.iptRestoreInput(n), ipt+"-restore", "-w", "--noflush"); err != nil {
			return err
		}
		present, err := m.iptJumpPresent(ctx, ipt)
		if err != nil {
			return err
		}
		if present {
			continue
		}
		if _, err = runMasqCmd(ctx, "", ipt, append([]string{"-w", "-t", "nat", "-A"}, m.iptJump()...)...); err != nil {
			return err
		}
	}
	return nil
}

// iptJumpPresent checks for the jump with -C: exit status 1 is "no such
// rule", 2 is "no such target chain" (both iptables-nft and -legacy).
func (m *masqRules) iptJumpPresent(ctx context.Context, ipt string) (bool, error) {
	_, err := runMasqCmd(ctx, "", ipt, append([]string{"-w", "-t", "nat", "-C"}, m.iptJump()...)...)
	switch masqExitCode(err) {
	case 0:
		return true, nil
	case 1, 2:
		return false, nil
	}
	return false, err
}

// removeIptables deletes, with the binary of each network's family, every
// copy of the jump, then flushes and deletes the chain if it exists.
func (m *masqRules) removeIptables(ctx context.Context) error {
	for _, ipt := range m.iptBinaries() {
		if err := m.removeIptablesOf(ctx, ipt); err != nil {
			return err
		}
	}
	return nil
}

// removeIptablesOf removes the jump and the chain of one binary (`-S chain`
// exits with status 1 when there is no chain).
func (m *masqRules) removeIptablesOf(ctx context.Context, ipt string) error {
	chain := m.iptChain()
	for range 16 {
		present, err := m.iptJumpPresent(ctx, ipt)
		if err != nil {
			return err
		}
		if !present {
			break
		}
		if _, err := runMasqCmd(ctx, "", ipt, append([]string{"-w", "-t", "nat", "-D"}, m.iptJump()...)...); err != nil {
			return err
		}
	}
	if _, err := runMasqCmd(ctx, "", ipt, "-w", "-t", "nat", "-S", chain); err != nil {
		if masqExitCode(err) == 1 {
			return nil // no chain, so no jump to it either
		}
		return err
	}
	for _, op := range []string{"-F", "-X"} {
		if _, err := runMasqCmd(ctx, "", ipt, "-w", "-t", "nat", op, chain); err != nil {
			return err
		}
	}
	return nil
}

// Running the tools

// masqCmdError is a failed command: its command line, how it failed, and
// what it wrote to standard error.
type masqCmdError struct {
	cmdline string
	err     error
	stderr  string
}

func (e *masqCmdError) Error() string {
	if e.stderr == "" {
		return fmt.Sprintf("%s: %v", e.cmdline, e.err)
	}
	return fmt.Sprintf("%s: %v: %s", e.cmdline, e.err, e.stderr)
}

func (e *masqCmdError) Unwrap() error { return e.err }

// runMasqCmd runs name with args, feeding it stdin when not empty, and
// returns its standard output. A failure is a *masqCmdError.
func runMasqCmd(ctx context.Context, stdin, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &masqCmdError{
			cmdline: masqCommandLine(name, args),
			err:     err,
			stderr:  strings.TrimSpace(stderr.String()),
		}
	}
	return stdout.String(), nil
}

// masqCommandLine quotes the arguments that need it, for error messages.
func masqCommandLine(name string, args []string) string {
	words := []string{name}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'") {
			a = fmt.Sprintf("%q", a)
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}

// masqExitCode is err's exit status: 0 for nil, -1 when the command did not run
// to an exit (not found, killed).
func masqExitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
