# uvxlan — userspace VXLAN overlay.
#   make build  bin/uvxlan (the agent and CLI), bin/uvxlan-cni (the CNI plugin) and
#               bin/uvxlan-sim (the simulation that `uvxlan bench gossip --mode sim` runs)
#   make demo   build, make a 3-host namespace testbed, run agents, ping, show the FDB, tear down
#   make unit   gofmt check, go vet, go test -race -short: the tests that need no root (no namespace test)
#   make test   gofmt check, go vet, go test -race (unit + namespace integration tests; root for the latter)

GO      ?= go
BIN     := bin/uvxlan
CNI_BIN := bin/uvxlan-cni
SIM_BIN := bin/uvxlan-sim
PKGS    := ./...

.PHONY: all build test fmt-check vet unit demo deps clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/uvxlan
	$(GO) build -o $(CNI_BIN) ./cmd/uvxlan-cni
	$(GO) build -o $(SIM_BIN) ./cmd/uvxlan-sim

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
