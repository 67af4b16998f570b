#!/usr/bin/env bash
# Build (once) a real kube-apiserver, kubectl and etcd for the Kubernetes
# integration tests, and the node's and control plane's other parts (kubelet,
# kube-scheduler, kube-controller-manager) for the tests of real nodes, and
# print the directory that holds them; the tests find it through
# UVXLAN_KUBE_BIN. The binaries come from a small module of their
# own under the cache directory, never from the project's go.mod: it requires
# k8s.io/kubernetes and replaces each of its staging modules by the published
# v0.x version (kubernetes' own go.mod replaces them by ./staging paths, which
# is why `go install k8s.io/kubernetes/cmd/...@v` fails). A cold build takes
# ~8 min and ~3 GB of memory on 2 vCPUs for the first three, ~11 min more for
# kubelet, scheduler and controller manager at load 5-7 (23.6 min at load
# 20-30); once built, this prints the path
# at once. Only missing binaries are built, so a cache of the first three gets
# the others added. Usage: scripts/kube-bins.sh   (UVXLAN_KUBE_CACHE to move the cache)
set -euo pipefail

KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.0
cache=${UVXLAN_KUBE_CACHE:-/var/cache/uvxlan-kube}/$KUBE_VERSION-etcd$ETCD_VERSION
bin=$cache/bin
# package:binary, in build order.
cmds="go.etcd.io/etcd/server/v3:etcd k8s.io/kubernetes/cmd/kubectl:kubectl k8s.io/kubernetes/cmd/kube-apiserver:kube-apiserver k8s.io/kubernetes/cmd/kubelet:kubelet k8s.io/kubernetes/cmd/kube-scheduler:kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager:kube-controller-manager"
missing=
for c in $cmds; do
	[ -x "$bin/${c##*:}" ] || missing="$missing $c"
done
if [ -z "$missing" ]; then
	echo "$bin"
	exit 0
fi

src=$cache/src
mkdir -p "$src" "$bin"
cd "$src"
export GOFLAGS=-mod=mod
kmod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
staging=${KUBE_VERSION/v1./v0.}
{
	echo "module uvxlan.test/kube-bins"
	echo
	echo "go 1.26.0"
	echo
	echo "require ("
	echo "	k8s.io/kubernetes $KUBE_VERSION"
	echo "	go.etcd.io/etcd/server/v3 $ETCD_VERSION"
	echo ")"
	echo
	echo "replace ("
	sed -n '/^replace (/,/^)/s#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*#\t\1 => \1 '"$staging"'#p' "$kmod"
	echo ")"
} >go.mod
cat >tools.go <<'GO'
//go:build tools

// Package tools records the commands this module builds, for go mod tidy.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
go mod tidy >&2
# A plain build reports version v0.0.0-master; kubelet reports its version
# on its Node, so the kube binaries get theirs.
minor=${KUBE_VERSION#v1.}
minor=${minor%%.*}
vpkg=k8s.io/component-base/version
ldflags="-X $vpkg.gitVersion=$KUBE_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor"
for c in $missing; do
	pkg=${c%%:*} name=${c##*:}
	echo "building $name ($pkg)" >&2
	start=$(date +%s)
	go build -trimpath -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg" >&2
	mv "$bin/$name.tmp" "$bin/$name"
	echo "built $name in $(($(date +%s) - start)) s" >&2
done
echo "$bin"
