# nodenet — see README.md. Every target works on a fresh Debian 12 machine as
# root with Go on PATH; `make deps` installs (or names) what is missing.

GO        ?= go
BIN       := bin
STATE     ?= /tmp/nodenet
PKGS      := ./...
# RUN_PKGS is what a local cluster needs (the daemons' userland, portmap);
# the tests also build and check the eBPF programs (clang, libbpf-dev) and boot
# Debian's kernel under qemu for the IPVS mode (proxy/ipvs/vmtest).
RUN_PKGS  := iptables nftables iproute2 conntrack containernetworking-plugins
APT_PKGS  := $(RUN_PKGS) ipset clang llvm libbpf-dev qemu-system-x86 busybox-static ipvsadm cpio xz-utils
export GOTOOLCHAIN := local

.PHONY: all build run test test-short bench lint clean deps check-deps upstream image kind kind-down bench-kind kind-deps fuzz chaos chaos-short

all: build

# hack/build.sh is go build that reports progress on a long (first) build and
# is quiet when the build cache is warm.
build:
	@GO=$(GO) ./hack/build.sh $(BIN)/nodenet ./cmd/nodenet
	@# The proxy alone, as the DaemonSet runs it (smaller resident memory).
	@GO=$(GO) ./hack/build.sh $(BIN)/nodenet-proxy ./cmd/nodenet-proxy
	@# The CNI plugin is exec'd per pod: static (no dynamic loader) starts faster.
	@CGO_ENABLED=0 GO=$(GO) ./hack/build.sh $(BIN)/nodenet-cni ./cmd/nodenet-cni
	@# The agent's shim, exec'd for each container and CNI plugin: static too.
	@CGO_ENABLED=0 GO=$(GO) ./hack/build.sh $(BIN)/nodenet-shim ./cmd/nodenet-shim
	@# The demo and chaos pods' echo server (`nodenet echo` maps to it):
	@# pods come and go ten a second under churn, so its start-up counts.
	@CGO_ENABLED=0 GO=$(GO) ./hack/build.sh $(BIN)/nodenet-echo ./cmd/nodenet-echo

# The main job: a 3-node cluster in network namespaces (nodenet up), then
# a demo (echo pods + a LoadBalancer Service; pod-to-pod, Service, NodePort
# and LoadBalancer traffic checked). A second `make run` while one runs is
# refused (`nodenet down --dir $(STATE)` or `up --replace` removes it).
# It keeps running until Ctrl-C; `make run DEMO_EXIT=1` exits after the
# demo, with status 0 only if every check passed (what CI runs).
NODES    ?= 3
BACKEND  ?= host-gw
PROXY_MODE ?= iptables
# HOST_ROUTING: flanneld's --host-routing, kernel (flannel's) or ebpf.
HOST_ROUTING ?= kernel
DEMO_EXIT ?=
# LB_IP_POOL: where LoadBalancer IPs come from (default 172.30.0.224/28);
# API_PORT: the root namespace's port for the API server (default 6443).
LB_IP_POOL ?=
API_PORT ?=
run: build
	@./hack/deps.sh $(RUN_PKGS)
	./$(BIN)/nodenet up --nodes $(NODES) --backend $(BACKEND) --proxy-mode $(PROXY_MODE) --host-routing $(HOST_ROUTING) --dir $(STATE) --demo $(if $(DEMO_EXIT),--demo-exit) \
		$(if $(LB_IP_POOL),--lb-ip-pool $(LB_IP_POOL)) $(if $(API_PORT),--api-port $(API_PORT))

# deps installs the Debian packages the privileged tests need when running as
# root with apt; otherwise it only checks and names what is missing.
deps:
	@./hack/deps.sh $(APT_PKGS)

# The whole suite, privileged tests included. NODENET_PRIVILEGED=1 turns every
# "needs root" skip into a failure, so CI cannot pass by skipping.
test: deps
	$(GO) vet $(PKGS)
	@ip netns list 2>/dev/null | awk '{print $$1}' | sort > .netns-before || true
	NODENET_PRIVILEGED=$${NODENET_PRIVILEGED:-$$( [ "$$(id -u)" = 0 ] && echo 1 || echo 0 )} \
		$(GO) test -count=1 -timeout 30m $(PKGS)
	@ip netns list 2>/dev/null | awk '{print $$1}' | sort | comm -13 .netns-before - | grep -E '^nnt-' > .netns-left || true; \
		rm -f .netns-before; \
		if [ -s .netns-left ]; then echo "tests left network namespaces behind:"; cat .netns-left; rm -f .netns-left; exit 1; fi; \
		rm -f .netns-left

# fuzz runs every Go fuzz target (func Fuzz*: the parsers of outside input —
# CNI config and prevResult, subnet.env, net-conf.json, host-local store
# files, CIDR-list flags, the token file, API request bodies of every kind,
# netlink replies and messages) for FUZZTIME each. Their seed corpora run in
# `make test` already; CI runs this with a short FUZZTIME, leaving out the
# packages whose instrumented build links client-go (see hack/fuzz.sh).
FUZZTIME ?= 30s
FUZZ_EXCLUDE ?=
fuzz:
	@GO=$(GO) FUZZ_EXCLUDE='$(FUZZ_EXCLUDE)' ./hack/fuzz.sh $(FUZZTIME)

# upstream builds (once, into ~/.cache/nodenet/upstream) the upstream
# binaries the interoperability tests run next to nodenet: flanneld and
# kube-proxy. kube-proxy takes 20–40 minutes cold, so tests skip it until
# this has run; see internal/upstream's package doc.
upstream:
	NODENET_UPSTREAM_BUILD=1 $(GO) test -count=1 -timeout 60m -run '^TestBuildUpstream$$' -v ./internal/upstream

# image builds the node daemons' container image, bin/nodenet-image.tar (an
# OCI layout with a Docker manifest.json: docker load, ctr images import and
# kind load image-archive all take it), without Docker or a registry: static
# nodenet + nodenet-cni and iptables/nftables from Debian packages (apt-get
# download, cached in ~/.cache/nodenet/debs). Same commit, same digest.
IMAGE_TAG ?=
image:
	$(GO) run ./cmd/nodenet-image --out $(BIN)/nodenet-image.tar $(if $(IMAGE_TAG),--tag $(IMAGE_TAG))

# test-short is the quick loop while editing: -short skips the tests that
# start local clusters, node agents, upstream binaries, the real-kernel
# data-plane suites and every kubectl version (each says so in its skip
# reason). `make test` and CI run everything; never add -short there.
test-short:
	$(GO) test -short -count=1 $(PKGS)

# Benchmarks print figures; see bench/README.md for what each measures.
bench: build
	@./hack/deps.sh $(APT_PKGS) iperf3
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./bench/...

# kind: a real Kubernetes v1.37.2 cluster (1 control-plane, 2 workers) with
# kind, built offline (see bench/kind/README.md), nodenet deployed by its
# DaemonSet, traffic checked in every proxy mode. Everything built is cached
# in ~/.cache/nodenet/kind: the first run takes 45–75 min on 2 cores, later
# ones a few minutes. The cluster stays up until `make kind-down`.
# KIND_DATAPLANE=upstream makes the same cluster with upstream flannel +
# kube-proxy instead, in KIND_UPSTREAM_MODES (kube-proxy's). A proxy mode
# the nodes cannot run (ebpf where a node's cgroup v2 root is the machine's: cgroup v1 and hybrid hosts) is skipped with the reason.
# bench-kind: netperf on such a cluster, a fresh one per backend and data
# plane (nodenet's modes, then upstream's KIND_UPSTREAM_MODES); report in
# bench/results/.
KIND_BACKEND ?= host-gw
KIND_DATAPLANE ?= nodenet
KIND_PROXY_MODES ?= iptables,nftables,ipvs,ebpf
KIND_UPSTREAM_MODES ?= iptables,nftables
KIND_BENCH_BACKENDS ?= host-gw,vxlan
kind-deps:
	@./hack/deps.sh debootstrap
kind: kind-deps build image
	$(GO) run ./bench/kind up -backend $(KIND_BACKEND) -dataplane $(KIND_DATAPLANE) -proxy-modes $(if $(filter upstream,$(KIND_DATAPLANE)),$(KIND_UPSTREAM_MODES),$(KIND_PROXY_MODES))

kind-down:
	$(GO) run ./bench/kind down

bench-kind: kind-deps build image
	$(GO) run ./bench/kind bench -backend $(KIND_BENCH_BACKENDS) -proxy-modes $(KIND_PROXY_MODES) -upstream-modes $(KIND_UPSTREAM_MODES)

# chaos: the chaos suite (bench/chaos, issue 17): a 3-node cluster per
# backend under steady load, faults injected one at a time (daemon kill -9,
# rules/routes/FDB entries removed by hand, endpoint churn), a leak audit;
# the report is bench/results/chaos.md. chaos-short is CI's form (a subset
# of the faults, short windows, < 3 min). Both hold the cluster lock.
CHAOS_BACKENDS ?= host-gw,vxlan
CHAOS_PROXY_MODE ?= iptables
CHAOS_OUT ?= bench/results/chaos.md
CHAOS_SHORT_OUT ?= /tmp/nodenet-chaos-short.md
# CHAOS_FLAGS: more flags of bench/chaos (e.g. -churn-rate 2 on a machine
# shared with other work; the default 10 runs on a quiet 2-core machine).
CHAOS_FLAGS ?=
chaos: build
	@./hack/deps.sh $(RUN_PKGS)
	flock /tmp/nodenet-cluster.lock $(GO) run ./bench/chaos -backend $(CHAOS_BACKENDS) -proxy-mode $(CHAOS_PROXY_MODE) -out $(CHAOS_OUT) $(CHAOS_FLAGS)

chaos-short: build
	@./hack/deps.sh $(RUN_PKGS)
	flock /tmp/nodenet-cluster.lock $(GO) run ./bench/chaos -short -backend host-gw -proxy-mode $(CHAOS_PROXY_MODE) -out $(CHAOS_SHORT_OUT)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

clean:
	rm -rf $(BIN)
