#!/usr/bin/env bash
# Compares uvxlan with kernel VXLAN on one 2-host namespace testbed, in one
# run: ping RTT (200 samples) and iperf3 TCP (one stream). The kernel pair
# uses port 8472 so both overlays live side by side. Needs root; tears
# everything down on exit. Usage: scripts/compare-kernel.sh [SECONDS]
set -euo pipefail
secs=${1:-10}
bin=${UVXLAN:-bin/uvxlan}
p=uvxcmp
trap '$bin testbed down --prefix $p' EXIT
$bin testbed up --prefix $p --hosts 2 >/dev/null
x() { ip netns exec "$p-$1" "${@:2}"; }

for i in 1 2; do
	o=$((3 - i))
	x h$i ip link add vx0 type vxlan id 100 dstport 8472 local 198.18.0.$i dev ul0
	x h$i bridge fdb append 00:00:00:00:00:00 dev vx0 dst 198.18.0.$o
	x h$i ip addr add 10.99.0.$i/24 dev vx0
	x h$i ip link set vx0 mtu 1450 up
	x h$i "$bin" run --local 198.18.0.$i --address 10.42.0.$i/24 --peer 198.18.0.$o --gossip=false \
		--control /run/uvxlan/$p-h$i.sock >/tmp/$p-h$i.log 2>&1 &
done
sleep 1
x h2 iperf3 -s -D -1 -B 10.42.0.2 -p 5201
x h2 iperf3 -s -D -1 -B 10.99.0.2 -p 5202
sleep 0.5

# "rtt min/avg/max/mdev = 0.286/0.415/0.725/0.122 ms"
rtt() { x h1 ping -q -c 200 -i 0.01 "$1" | awk '/^rtt/ {split($4, v, "/"); print v[2] " ms avg (min " v[1] ", max " v[3] ")"}'; }
tcp() { x h1 iperf3 -c "$1" -p "$2" -t "$secs" -J | awk '/"sum_received"/ {f=1} f && /bits_per_second/ {gsub(/[,]/,""); printf "%.2f Gbit/s\n", $2/1e9; exit}'; }

echo "ping   uvxlan: $(rtt 10.42.0.2)"
echo "ping   kernel: $(rtt 10.99.0.2)"
echo "tcp    uvxlan: $(tcp 10.42.0.2 5201)"
echo "tcp    kernel: $(tcp 10.99.0.2 5202)"
