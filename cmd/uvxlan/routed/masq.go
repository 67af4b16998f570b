package routed

// IP masquerade for the routed overlay (--ip-masq), with flannel's semantics.
//
// In routed mode a cluster network (say 10.244.0.0/16) is cut into per-node
// subnets, and the overlay carries traffic between them with the endpoints'
// own addresses. Those addresses mean nothing outside the cluster, so traffic
// that leaves it must leave with the node's address instead:
//
//   - source in the cluster network, destination in it: never NATed
//     (overlay traffic keeps its addresses end to end);
//   - source in the cluster network, destination multicast (224.0.0.0/4):
//     never NATed, as flannel does;
//   - source in the cluster network, any other destination: MASQUERADE, that
//     is source NAT to the address of the interface the packet leaves by;
//   - anything else: not ours, untouched.
//
// The rules live in a place of their own, named after the agent's tag (its
// TAP name), so two agents on one host do not collide and nobody else's rules
// are touched:
//
//   - nftables: table ip uvxlan-<tag> with one chain, postrouting, of
//     type nat at hook postrouting, priority srcnat. Install replaces the
//     whole table in one transaction (`nft -f -`: add table; delete table;
//     table {...}), so a crashed agent's table is replaced, not doubled, and
//     there is no moment without rules. nftables 1.0.6 (Debian 12) has no
//     `destroy table`, hence the add-then-delete idiom.
//   - iptables: chain UVXLAN-MASQ-<tag> in table nat,
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
	backend string       // masqNftables or masqIptables
	network netip.Prefix // masked
	tag     string
}

// installMasq installs the masquerade rules for the cluster network (an IPv4
// prefix: the routed overlay is IPv4 only), tagging them with tag (the agent's TAP name: letters,
// digits, '.', '_' and '-', at most 15 characters). backend "" picks nftables
// when the nft binary is on PATH and works, else iptables when it is on PATH, else it fails saying neither was found; "nftables"
// or "iptables" forces one. Installing again with the same tag replaces what was there, also when it was left behind by an agent
// that crashed, so there is always exactly one copy. It blocks while the
// commands run; ctx bounds them.
func installMasq(ctx context.Context, network netip.Prefix, tag, backend string) (*masqRules, error) {
	if !network.IsValid() || !network.Addr().Is4() {
		return nil, fmt.Errorf("ip-masq: invalid cluster network %s: need an IPv4 prefix", network)
	}
	if err := checkMasqTag(tag); err != nil {
		return nil, err
	}
	m := &masqRules{network: network.Masked(), tag: tag}
	switch backend {
	case "":
		b, err := pickMasqBackend(ctx, iptables)
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
		return nil, fmt.Errorf("ip-masq: install %s rules for %s: %w", m.backend, m.network, err)
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
		return fmt.Errorf("ip-masq: remove %s rules for %s: %w", m.backend, m.network, err)
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
// tables (the kernel has nf_tables and we may use it), else iptables when ipt
// (and its -restore) is on PATH.
func pickMasqBackend(ctx context.Context, ipt string) (string, error) {
	_, nftErr := exec.LookPath("nft")
	if nftErr == nil {
		if _, nftErr = runMasqCmd(ctx, "", "nft", "list", "tables"); nftErr == nil {
			return masqNftables, nil
		}
	}
	_, iptErr := exec.LookPath(ipt)
	if iptErr == nil {
		_, iptErr = exec.LookPath(ipt + "-restore")
	}
	if iptErr == nil {
		return masqIptables, nil
	}
	return "", fmt.Errorf("ip-masq: neither nftables nor %s was found (nft: %v; %v); install the nftables or iptables package", ipt, nftErr, iptErr)
}

// multicast is the destination range that is never NATed.
var multicast = netip.MustParsePrefix("224.0.0.0/4")

// nftables

// nftFamily is both the table family and the match keyword.
const nftFamily = "ip"

func (m *masqRules) nftTable() string { return "uvxlan-" + m.tag }

// nftRemoveScript deletes the table, whether or not it exists.
func (m *masqRules) nftRemoveScript() string {
	return fmt.Sprintf("add table %[1]s %[2]s\ndelete table %[1]s %[2]s\n", nftFamily, m.nftTable())
}

// nftInstallScript replaces the table in one transaction:
//
//	add table ip uvxlan-uvx0
//	delete table ip uvxlan-uvx0
//	table ip uvxlan-uvx0 {
//		chain postrouting {
//			type nat hook postrouting priority srcnat; policy accept;
//			ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return
//			ip saddr 10.244.0.0/16 ip daddr 224.0.0.0/4 return
//			ip saddr 10.244.0.0/16 masquerade
//		}
//	}
func (m *masqRules) nftInstallScript() string {
	f, n := nftFamily, m.network
	var b strings.Builder
	b.WriteString(m.nftRemoveScript())
	fmt.Fprintf(&b, "table %s %s {\n", f, m.nftTable())
	b.WriteString("\tchain postrouting {\n")
	b.WriteString("\t\ttype nat hook postrouting priority srcnat; policy accept;\n")
	fmt.Fprintf(&b, "\t\t%s saddr %s %s daddr %s return\n", f, n, f, n)
	fmt.Fprintf(&b, "\t\t%s saddr %s %s daddr %s return\n", f, n, f, multicast)
	fmt.Fprintf(&b, "\t\t%s saddr %s masquerade\n", f, n)
	b.WriteString("\t}\n}\n")
	return b.String()
}

// iptables

// iptables is the binary that edits the IPv4 tables.
const iptables = "iptables"

func (m *masqRules) iptChain() string { return "UVXLAN-MASQ-" + m.tag }

// iptJump is the POSTROUTING rule that sends everything to our chain.
func (m *masqRules) iptJump() []string {
	return []string{"POSTROUTING", "-m", "comment", "--comment", "uvxlan ip-masq " + m.tag, "-j", m.iptChain()}
}

// iptRestoreInput declares (and so creates or flushes) the chain and fills
// it, for iptables-restore --noflush:
//
//	*nat
//	:UVXLAN-MASQ-uvx0 - [0:0]
//	-A UVXLAN-MASQ-uvx0 -s 10.244.0.0/16 -d 10.244.0.0/16 -j RETURN
//	-A UVXLAN-MASQ-uvx0 -s 10.244.0.0/16 -d 224.0.0.0/4 -j RETURN
//	-A UVXLAN-MASQ-uvx0 -s 10.244.0.0/16 -j MASQUERADE
//	COMMIT
func (m *masqRules) iptRestoreInput() string {
	c, n := m.iptChain(), m.network
	var b strings.Builder
	b.WriteString("*nat\n")
	fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	fmt.Fprintf(&b, "-A %s -s %s -d %s -j RETURN\n", c, n, n)
	fmt.Fprintf(&b, "-A %s -s %s -d %s -j RETURN\n", c, n, multicast)
	fmt.Fprintf(&b, "-A %s -s %s -j MASQUERADE\n", c, n)
	b.WriteString("COMMIT\n")
	return b.String()
}

func (m *masqRules) installIptables(ctx context.Context) error {
	ipt := iptables
	if _, err := runMasqCmd(ctx, m.iptRestoreInput(), ipt+"-restore", "-w", "--noflush"); err != nil {
		return err
	}
	present, err := m.iptJumpPresent(ctx)
	if err != nil || present {
		return err
	}
	_, err = runMasqCmd(ctx, "", ipt, append([]string{"-w", "-t", "nat", "-A"}, m.iptJump()...)...)
	return err
}

// iptJumpPresent checks for the jump with -C: exit status 1 is "no such
// rule", 2 is "no such target chain" (both iptables-nft and -legacy).
func (m *masqRules) iptJumpPresent(ctx context.Context) (bool, error) {
	_, err := runMasqCmd(ctx, "", iptables, append([]string{"-w", "-t", "nat", "-C"}, m.iptJump()...)...)
	switch masqExitCode(err) {
	case 0:
		return true, nil
	case 1, 2:
		return false, nil
	}
	return false, err
}

// removeIptables deletes every copy of the jump, then flushes and deletes
// the chain if it exists (`-S chain` exits with status 1 when it does not).
func (m *masqRules) removeIptables(ctx context.Context) error {
	ipt, chain := iptables, m.iptChain()
	for range 16 {
		present, err := m.iptJumpPresent(ctx)
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
