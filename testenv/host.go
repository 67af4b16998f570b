// Host: running commands inside a host namespace, and kernel VXLAN peers.

package testenv

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"time"
)

// runTimeout bounds Host.Run when its context has no deadline.
const runTimeout = 2 * time.Minute

// Exec returns a command that runs name with args inside the host's namespace
// (`ip netns exec <netns> name args...`). The process is killed when ctx is
// done. The caller starts and waits for it.
func (h *Host) Exec(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Netns, name}, args...)...)
	cmd.WaitDelay = 5 * time.Second // so a stray grandchild holding a pipe cannot block Wait
	return cmd
}

// Run runs name with args inside the host's namespace and returns its
// combined output. When ctx has no deadline, Run gives it two minutes. The
// error names the command line and carries the output.
func (h *Host) Run(ctx context.Context, name string, args ...string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, runTimeout)
		defer cancel()
	}
	return combined(ctx, h.Exec(ctx, name, args...))
}

// ip runs `ip -n <netns> args...` with cmdTimeout.
func (h *Host) ip(ctx context.Context, args ...string) error {
	_, err := run(ctx, "ip", append([]string{"-n", h.Netns}, args...)...)
	return err
}

// KernelVXLAN describes a Linux kernel VXLAN device, the reference peer for
// interoperability tests.
type KernelVXLAN struct {
	Name     string       // device name; default "vx0"
	VNI      uint32       // 24-bit VXLAN network identifier
	Port     int          // UDP destination port; default 4789
	Remotes  []netip.Addr // VTEPs that get every broadcast, unknown and multicast frame (all-zeros FDB entries)
	Address  netip.Prefix // overlay address of the device; optional
	MTU      int          // default: the underlay MTU - 50
	Learning bool         // learn remote MACs from received frames (the kernel's "learning")
	// KeepOffloads skips "ethtool -K NAME tx off", as a user following
	// the kernel's own recipe would: the device then sends inner TCP and
	// UDP with partial checksums (see AddKernelVXLAN), which kernel peers
	// accept and uvxlan completes. Benchmarks keep the kernel's offloads
	// so that it runs at its real speed.
	KeepOffloads bool
}

// AddKernelVXLAN creates a kernel VXLAN device in the host, bound to its
// underlay address and ul0:
//
//	ip link add NAME type vxlan id VNI dstport PORT local UNDERLAY dev ul0 [nolearning]
//	ip addr add ADDRESS dev NAME
//	ip link set NAME mtu MTU up
//	bridge fdb append 00:00:00:00:00:00 dev NAME dst REMOTE   (for each remote)
//	ethtool -K NAME tx off
//
// The last step (left out with KeepOffloads) makes the kernel finish inner
// checksums itself. With checksum offload on, the device hands the underlay
// TCP and UDP segments whose inner checksum is only a pseudo-header sum, for
// the NIC to complete. A physical NIC does; a veth does not, and a
// userspace peer's UDP socket receives the unfinished checksum. uvxlan
// completes it (counter rx_partial_checksums); a peer that does not drops
// every TCP segment (ping, having no offload, still works). Behind a real
// NIC the step changes nothing but speed.
func (h *Host) AddKernelVXLAN(ctx context.Context, vx KernelVXLAN) error {
	if vx.Name == "" {
		vx.Name = "vx0"
	}
	if vx.Port == 0 {
		vx.Port = 4789
	}
	if vx.MTU == 0 {
		vx.MTU = h.MTU - 50
	}
	if vx.VNI >= 1<<24 {
		return fmt.Errorf("testenv: %s: kernel vxlan %s: VNI %d does not fit in 24 bits", h.Name, vx.Name, vx.VNI)
	}
	if vx.Port < 1 || vx.Port > 65535 {
		return fmt.Errorf("testenv: %s: kernel vxlan %s: port %d outside 1..65535", h.Name, vx.Name, vx.Port)
	}
	for _, r := range vx.Remotes {
		if !r.Is4() {
			return fmt.Errorf("testenv: %s: kernel vxlan %s: remote %s is not an IPv4 underlay address", h.Name, vx.Name, r)
		}
	}

	add := []string{"link", "add", vx.Name, "type", "vxlan", "id", strconv.FormatUint(uint64(vx.VNI), 10),
		"dstport", strconv.Itoa(vx.Port), "local", h.Underlay.String(), "dev", h.Iface}
	if !vx.Learning {
		add = append(add, "nolearning")
	}
	steps := [][]string{add}
	if vx.Address.IsValid() {
		steps = append(steps, []string{"addr", "add", vx.Address.String(), "dev", vx.Name})
	}
	steps = append(steps, []string{"link", "set", vx.Name, "mtu", strconv.Itoa(vx.MTU), "up"})
	for _, step := range steps {
		if err := h.ip(ctx, step...); err != nil {
			return fmt.Errorf("testenv: %s: kernel vxlan %s: %w", h.Name, vx.Name, err)
		}
	}
	for _, r := range vx.Remotes {
		_, err := run(ctx, "bridge", "-n", h.Netns, "fdb", "append", "00:00:00:00:00:00", "dev", vx.Name, "dst", r.String())
		if err != nil {
			return fmt.Errorf("testenv: %s: kernel vxlan %s: %w", h.Name, vx.Name, err)
		}
	}
	if vx.KeepOffloads {
		return nil
	}
	if out, err := h.Run(ctx, "ethtool", "-K", vx.Name, "tx", "off"); err != nil {
		return fmt.Errorf("testenv: %s: kernel vxlan %s: turn checksum offload off: %w\n%s", h.Name, vx.Name, err, out)
	}
	return nil
}
