#!/usr/bin/env bash
# Installs the system packages uvxlan's testbeds, demo and tests use, when
# they are missing. Debian/Ubuntu (apt-get); needs root.
set -euo pipefail

need=()
command -v ip      >/dev/null 2>&1 || need+=(iproute2)
command -v bridge  >/dev/null 2>&1 || need+=(iproute2)
command -v ping    >/dev/null 2>&1 || need+=(iputils-ping)
command -v iperf3  >/dev/null 2>&1 || need+=(iperf3)
command -v tcpdump >/dev/null 2>&1 || need+=(tcpdump)
command -v tshark  >/dev/null 2>&1 || need+=(tshark)
command -v ethtool >/dev/null 2>&1 || need+=(ethtool)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing ${need[*]}; run as root (or install them) first" >&2
	exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "deps: missing ${need[*]} and no apt-get here; install them with your package manager" >&2
	exit 1
fi
echo "deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${need[@]}" | sort -u) >/dev/null
