#!/usr/bin/env bash
# Build (once) a real kube-apiserver, kubectl and etcd for the Kubernetes
# integration tests, and print the directory that holds them; the tests find
# it through UVXLAN_KUBE_BIN. The binaries come from a small module of their
# own under the cache directory, never from the project's go.mod: it requires
# k8s.io/kubernetes and replaces each of its staging modules by the published
# v0.x version (kubernetes' own go.mod replaces them by ./staging paths, which
# is why `go install k8s.io/kubernetes/cmd/...@v` fails). A cold build takes
# ~8 min and ~3 GB of memory on 2 vCPUs; once built, this prints the path at
# once. Usage: scripts/kube-bins.sh   (UVXLAN_KUBE_CACHE to move the cache)
set -euo pipefail

KUBE_VERSION=v1.37.2
ETCD_VERSION=v3.7.0
cache=${UVXLAN_KUBE_CACHE:-/var/cache/uvxlan-kube}/$KUBE_VERSION-etcd$ETCD_VERSION
bin=$cache/bin
if [ -x "$bin/kube-apiserver" ] && [ -x "$bin/kubectl" ] && [ -x "$bin/etcd" ]; then
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
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
go mod tidy >&2
for c in go.etcd.io/etcd/server/v3:etcd k8s.io/kubernetes/cmd/kubectl:kubectl k8s.io/kubernetes/cmd/kube-apiserver:kube-apiserver; do
	pkg=${c%%:*} name=${c##*:}
	echo "building $name ($pkg)" >&2
	go build -trimpath -o "$bin/$name.tmp" "$pkg" >&2
	mv "$bin/$name.tmp" "$bin/$name"
done
echo "$bin"
