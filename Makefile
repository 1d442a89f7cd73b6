# manifold: see README.md. Every target works on a fresh machine as root.
SHELL := /bin/bash
GO ?= go
CACHE ?= $(HOME)/.cache/manifold
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
IMAGE ?= ghcr.io/manifold-cni/manifold:$(VERSION)
LDFLAGS := -s -w -X main.Version=$(VERSION) -X github.com/manifold-cni/manifold/flow.Version=$(VERSION)
FUZZTIME ?= 20s
FUZZ_TARGETS := netconf:FuzzParseNetworksAnnotation netconf:FuzzDRAAnnotations netconf:FuzzParseConfig netconf:FuzzParseNetwork scratch:FuzzDecode shimproto:FuzzReadRequest cmd/manifold-shim:FuzzTopLevelStrings

export MANIFOLD_CACHE := $(CACHE)

# The binaries the test, demo and bench targets run, by the variables their
# harnesses read (e2e/README.md). The build scripts print their cached paths
# at once when warm, and take a lock while they build.
TOOL_ENV = MANIFOLD_BIN=$(CURDIR)/bin/manifold \
	MANIFOLD_SHIM=$(CURDIR)/bin/manifold-shim \
	MANIFOLD_PLUGINS_DIR=$$(bash hack/build-plugins.sh) \
	MANIFOLD_KUBE_APISERVER=$$(bash hack/build-control-plane.sh | sed -n 1p) \
	MANIFOLD_ETCD=$$(bash hack/build-control-plane.sh | sed -n 2p) \
	MANIFOLD_KUBE_SCHEDULER=$$(bash hack/build-control-plane.sh | sed -n 3p) \
	MANIFOLD_KUBE_CONTROLLER_MANAGER=$$(bash hack/build-control-plane.sh | sed -n 4p) \
	MANIFOLD_KUBECTL=$$(bash hack/build-control-plane.sh | sed -n 5p) \
	MANIFOLD_CONTAINERD_DIR=$$(bash hack/build-node.sh | sed -n 1p) \
	MANIFOLD_KUBELET=$$(bash hack/build-node.sh | sed -n 2p)
# make test runs the runtime tier, the real node and the cluster tier on CRI-O
# too; the demo and the bench do only with RUNTIME=crio (or both, the
# bench), so that by default they need neither its build nor the C compiler
# and conmon it takes.
TEST_ENV = $(TOOL_ENV) MANIFOLD_CRIO_DIR=$$(bash hack/build-crio.sh)
# RUNTIME is the node's runtime of make demo (containerd or crio) and the
# runtime section's of make bench (containerd, crio or both).
RUNTIME ?= containerd
comma := ,
WITH_CRIO = $(filter crio both,$(RUNTIME))
CRIO_ENV = $(if $(WITH_CRIO),MANIFOLD_CRIO_DIR=$$(bash hack/build-crio.sh))
BENCH_RUNTIMES = $(if $(filter both,$(RUNTIME)),containerd$(comma)crio,$(RUNTIME))

.PHONY: all build image tools demo-tools plugins control-plane node crio test unit fuzz demo bench bench-compare lint clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/manifold ./cmd/manifold
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/manifold-daemon ./cmd/manifold-daemon
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/manifold-install ./cmd/manifold-install
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o bin/manifold-shim ./cmd/manifold-shim

# manifold's image without Docker (ociimage/, cmd/manifold-image): the
# binaries of build, packed as $(IMAGE) into bin/manifold-image.tar for
# ctr images import, docker load or podman load. The same commit gives the
# same digest.
image:
	$(GO) run ./cmd/manifold-image -version '$(VERSION)' -ref '$(IMAGE)' -out bin/manifold-image.tar

# The test plugins, the control plane and the nodes (containerd, the kubelet;
# CRI-O with pinns), built from Go modules into $(CACHE).
tools: plugins control-plane node crio

# What the demo and the bench run: tools without CRI-O.
demo-tools: plugins control-plane node

plugins:
	@bash hack/build-plugins.sh >/dev/null

control-plane:
	@bash hack/build-control-plane.sh >/dev/null

node:
	@bash hack/build-node.sh >/dev/null

crio:
	@bash hack/build-crio.sh >/dev/null

# Every tier: unit, privileged (real netns and plugins), e2e (real
# kube-apiserver and etcd) with its runtime tier and real node (containerd and
# CRI-O, runc, the kubelet), the cluster tier on containerd and then again on
# CRI-O, then each fuzz target for $(FUZZTIME).
test: build tools
	$(TEST_ENV) MANIFOLD_CLUSTER_RUNTIME=containerd $(GO) test -count=1 -timeout 40m ./...
	$(TEST_ENV) MANIFOLD_CLUSTER_RUNTIME=crio $(GO) test -count=1 -timeout 40m ./e2e/cluster/
	$(MAKE) fuzz

unit:
	$(GO) test -count=1 ./netconf/... ./scratch/... ./podresources/... ./devinfo/...

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
	  echo "fuzz $${t%%:*} $${t##*:} for $(FUZZTIME)"; \
	  GO=$(GO) bash hack/fuzz.sh $${t%%:*} $${t##*:} $(FUZZTIME); \
	done

demo: build demo-tools $(if $(WITH_CRIO),crio)
	$(TOOL_ENV) $(CRIO_ENV) MANIFOLD_CLUSTER_RUNTIME=$(RUNTIME) $(GO) run ./e2e/demo

bench: build demo-tools $(if $(WITH_CRIO),crio)
	$(TOOL_ENV) $(CRIO_ENV) $(GO) run ./bench -runtimes $(BENCH_RUNTIMES) -out bench-results.json

# The overhead section with another git revision as the baseline arms, thin
# and daemon mode, in the same iterations as today's (docs/performance.md):
# make bench-compare REV=<revision> [BENCHFLAGS='-n 20 -kinds real -nets 3'].
# hack/bench-compare.sh builds the revision (git archive, its own go.mod) into
# $(CACHE)/baseline-<commit>.
bench-compare: build plugins control-plane
	@test -n "$(REV)" || { echo "usage: make bench-compare REV=<git revision>" >&2; exit 2; }
	base=$$(bash hack/bench-compare.sh '$(REV)') && \
	shim=$$([ -x $$base/manifold-shim ] && echo "-baseline-shim $$base/manifold-shim" || true) && \
	MANIFOLD_BIN=$(CURDIR)/bin/manifold \
	MANIFOLD_SHIM=$(CURDIR)/bin/manifold-shim \
	MANIFOLD_PLUGINS_DIR=$$(bash hack/build-plugins.sh) \
	MANIFOLD_KUBE_APISERVER=$$(bash hack/build-control-plane.sh | sed -n 1p) \
	MANIFOLD_ETCD=$$(bash hack/build-control-plane.sh | sed -n 2p) \
	$(GO) run ./bench -only overhead -baseline $$base/manifold $$shim -out bench-compare.json $(BENCHFLAGS)

# The last two lines run the repository's own checker of its tests
# (hack/testlint, a module of its own: sleeps before checks, polls that end
# quietly at their deadline, skips that MANIFOLD_REQUIRE_PRIVILEGED cannot
# turn into failures), after its own tests.
lint:
	gofmt -l . | (! grep .)
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	cd hack/testlint && $(GO) vet ./... && $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./... && \
	  $(GO) test -count=1 ./... && $(GO) build -o $(CURDIR)/bin/testlint ./cmd/testlint
	$(GO) vet -vettool=$(CURDIR)/bin/testlint ./...

clean:
	rm -rf bin bench-results.json bench-compare.json
