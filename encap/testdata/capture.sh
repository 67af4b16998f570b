#!/bin/sh
# capture.sh regenerates kernel-vxlan.pcap: real VXLAN datagrams sent by the
# Linux kernel VXLAN driver (VNI 0xABCDEF = 11259375) between two throwaway
# network namespaces joined by a veth pair. Needs root, iproute2 and tcpdump.
# Nothing leaves the namespaces; they are deleted on exit, also on failure.
#
#	sh encap/testdata/capture.sh   # from the module root
set -eu

out=$(cd "$(dirname "$0")" && pwd)/kernel-vxlan.pcap
a=uvx-golden-a
b=uvx-golden-b
cleanup() {
	ip netns del "$a" 2>/dev/null || true
	ip netns del "$b" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

ip netns add "$a"
ip netns add "$b"
for ns in "$a" "$b"; do
	# No IPv6: keeps router solicitations and MLD out of the capture.
	ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
	ip -n "$ns" link set lo up
done

# Underlay: veth pair, 198.18.0.0/24 (RFC 2544 benchmarking range).
ip link add va netns "$a" type veth peer name vb netns "$b"
ip -n "$a" addr add 198.18.0.1/24 dev va
ip -n "$b" addr add 198.18.0.2/24 dev vb
ip -n "$a" link set va up
ip -n "$b" link set vb up

# Overlay: kernel VXLAN devices, VNI 11259375 (0xABCDEF: all three bytes
# non-zero), fixed MACs so the capture is reproducible, 192.0.2.0/24 inside.
ip -n "$a" link add vx0 address 02:00:5e:00:00:0a type vxlan id 11259375 dstport 4789 local 198.18.0.1 remote 198.18.0.2 dev va
ip -n "$b" link add vx0 address 02:00:5e:00:00:0b type vxlan id 11259375 dstport 4789 local 198.18.0.2 remote 198.18.0.1 dev vb
ip -n "$a" addr add 192.0.2.1/24 dev vx0
ip -n "$b" addr add 192.0.2.2/24 dev vx0
ip -n "$a" link set vx0 up
ip -n "$b" link set vx0 up

# Capture the first 4 VXLAN datagrams on the underlay (ARP request, ARP reply,
# ICMP echo request, ICMP echo reply), full length.
ip netns exec "$a" tcpdump -q -n -i va -s 0 -c 4 -U -w "$out" udp dst port 4789 &
dump=$!
sleep 1 # let tcpdump attach
ip netns exec "$a" ping -c 1 -W 2 192.0.2.2 >/dev/null
wait "$dump"
ls -l "$out"
