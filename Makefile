# uvxlan — userspace VXLAN overlay.
#   make build  bin/uvxlan (the agent and CLI), bin/uvxlan-cni (the CNI plugin) and
#               bin/uvxlan-sim (the simulation that `uvxlan bench gossip --mode sim` runs)
#   make image  bin/uvxlan-image.tar: a container image of the static agent and CNI plugin,
#               tagged $(IMAGE):$(VERSION), for `ctr images import` or `podman load`
#   make demo   build, make a 3-host namespace testbed, run agents, ping, show the FDB, tear down
#   make unit   gofmt check, go vet, go test -race -short: the tests that need no root (no namespace test)
#   make test   gofmt check, go vet, go test -race (unit + namespace integration tests; root for the latter)

GO      ?= go
BIN     := bin/uvxlan
CNI_BIN := bin/uvxlan-cni
SIM_BIN := bin/uvxlan-sim
PKGS    := ./...
# The release: what `uvxlan --version` says and the image's tag, the one
# deploy/kubernetes/uvxlan.yaml names (a test checks they agree).
VERSION ?= 0.1.0
IMAGE   ?= ghcr.io/uvxlan/uvxlan
LDFLAGS := -X main.release=$(VERSION)
IMAGE_TAR ?= bin/uvxlan-image.tar
IMAGE_BIN ?= bin/image

.PHONY: all build image test fmt-check vet unit demo deps clean

all: build

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/uvxlan
	$(GO) build -o $(CNI_BIN) ./cmd/uvxlan-cni
	$(GO) build -o $(SIM_BIN) ./cmd/uvxlan-sim

# The image holds the agent and uvxlan-cni, static (CGO_ENABLED=0), and
# nothing else: no shell, no package manager, no libc. scripts/mkimage
# writes the tarball itself (no registry, no daemon); the reference CNI
# plugins uvxlan-cni delegates to (bridge, host-local, portmap) are the
# node's, in /opt/cni/bin. Push it with
#   skopeo copy docker-archive:bin/uvxlan-image.tar docker://REGISTRY/uvxlan:$(VERSION)
image:
	mkdir -p $(IMAGE_BIN) $(dir $(IMAGE_TAR))
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(IMAGE_BIN)/uvxlan ./cmd/uvxlan
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(IMAGE_BIN)/uvxlan-cni ./cmd/uvxlan-cni
	$(GO) run ./scripts/mkimage -o $(IMAGE_TAR) -tag $(IMAGE):$(VERSION) -entrypoint /usr/local/bin/uvxlan \
		$(IMAGE_BIN)/uvxlan=/usr/local/bin/uvxlan $(IMAGE_BIN)/uvxlan-cni=/usr/local/bin/uvxlan-cni

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# -short skips every test that builds a namespace testbed (testenv.Require
# and the encap tests' own namespaces), whoever runs it; the environment's
# UVXLAN_REQUIRE_NETNS=1, which would turn those skips into failures, is
# cleared.
unit: fmt-check vet
	UVXLAN_REQUIRE_NETNS= $(GO) test -race -short -count=1 -timeout 15m $(PKGS)

# The integration tests build the binary themselves; they need root,
# /dev/net/tun, iproute2, ping, iperf3 and tcpdump (see scripts/deps.sh).
test: fmt-check vet
	$(GO) test -race -count=1 -parallel 4 -timeout 25m $(PKGS)

demo: deps build
	./$(BIN) demo

deps:
	@scripts/deps.sh

clean:
	rm -rf bin
