# runmesh — `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/runmesh/runmesh/controlplane.Version=$(VERSION) -X main.version=$(VERSION)
# PKG and RUN narrow a test run: make test PKG=./graph/... RUN=TestAudit
PKG ?= ./...
RUN ?=
# -count=1: the end-to-end tests build binaries in a subprocess, which Go's
# test cache cannot see; a cached pass could hide a broken server.
GOTESTFLAGS ?= -count=1 -timeout 30m $(if $(RUN),-run '$(RUN)')
# go-nvml's header marks many functions deprecated; we call none of those.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# The agent links podman's bindings, which build only with these tags: OpenPGP
# in Go instead of gpgme's C library, no btrfs graph driver (its headers), the
# remote client's code. Every go command below gets them; outside make, set
# GOFLAGS=-tags=$(PODMAN_TAGS) yourself.
PODMAN_TAGS := remote,containers_image_openpgp,exclude_graphdriver_btrfs
export GOFLAGS := $(strip $(filter-out -tags=%,$(GOFLAGS)) -tags=$(PODMAN_TAGS))
GENERATED := controlplane/internal/store/internal/dbsqlc graph/generated graph/model cmd/runmesh/internal/api

.DEFAULT_GOAL := help

.PHONY: help generate verify lint test test-e2e fuzz mutation chaos build playground packages lint-packages test-packages demo check bench bench-pki bench-heartbeat bench-lease bench-start bench-data bench-interactive

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

generate: ## regenerate the sqlc store code, the gqlgen API code and the CLI's genqlient client
	cd controlplane/internal/store && $(GO) tool sqlc generate
	$(GO) tool gqlgen generate
	cd cmd/runmesh && $(GO) tool genqlient

verify: ## fail if the generated code differs from what the sources generate
	@snap=$$(mktemp -d); trap 'rm -rf "$$snap"' EXIT; \
		for d in $(GENERATED) $(wildcard graph/*.resolvers.go); do mkdir -p "$$snap/$$(dirname $$d)"; cp -r "$$d" "$$snap/$$d"; done; \
		$(MAKE) --no-print-directory generate >/dev/null; \
		stale=0; for d in $(GENERATED) $(wildcard graph/*.resolvers.go); do diff -r "$$snap/$$d" "$$d" >/dev/null || { echo "stale: $$d"; stale=1; }; done; \
		test $$stale = 0 || { echo "generated code was stale: 'make generate' has now regenerated it; review and commit"; exit 1; }

lint: ## gofmt, go vet, and no build outputs in the tree
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
		test -z "$$unformatted" || { echo "not gofmt-ed: $$unformatted"; exit 1; }
	@binaries=$$(git ls-files -z | xargs -0 file --mime-type | grep -E ':[[:space:]]+application/(x-executable|x-pie-executable|x-sharedlib)$$' | cut -d: -f1); \
		test -z "$$binaries" || { echo "binaries are tracked (build into bin/): $$binaries"; exit 1; }
	$(GO) vet ./...
	$(GO) -C bench vet ./...

test: ## all tests against a throwaway PostgreSQL (started and stopped here), the fuzzers briefly, chaos -short, test-e2e, the packages
	scripts/ensure-chromium.sh
	$(GO) run ./internal/pgcluster/withpg -- $(GO) test $(GOTESTFLAGS) $(PKG)
	@if [ "$(PKG)" = ./... ] && [ -z "$(RUN)" ]; then $(GO) -C bench test $(GOTESTFLAGS) ./... && \
		$(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME) && \
		$(MAKE) --no-print-directory chaos CHAOSFLAGS=-short && \
		$(MAKE) --no-print-directory test-e2e && \
		$(MAKE) --no-print-directory lint-packages test-packages; else echo "bench/, the fuzzers and test-e2e left out of a narrowed run"; fi

# Every parser of untrusted input has a fuzz target (package:target). Their
# seeds run with the tests; `make fuzz` fuzzes each for FUZZTIME (make test:
# TEST_FUZZTIME), against a throwaway PostgreSQL where it needs one.
FUZZ_TARGETS = ./controlplane:FuzzRunnerAPI ./controlplane/runnerhttp:FuzzDuplicateKey ./graph:FuzzGraphQL ./controlplane/config:FuzzParse \
	./agent:FuzzLoadConfig ./internal/devenv:FuzzRead ./pki:FuzzParseCSR ./pki:FuzzParseCertificates ./runnerapi:FuzzParseSelector
FUZZTIME ?= 60s
TEST_FUZZTIME ?= 3s

fuzz: ## fuzz every target for FUZZTIME each (default 60s)
	$(GO) run ./internal/pgcluster/withpg -- scripts/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

# Mutation testing (gremlins, built patched by scripts/gremlins.sh) of the
# code whose tests guard the most: pki, the fleet's and the queue's rules,
# the agent's worker. Each scope is a whole package: it must kill
# MUTATION_EFFICACY % of the mutants its own tests cover and cover
# MUTATION_COVERAGE % of them (docs/mutation.md names every surviving
# mutant and why it is acceptable).
MUTATION_SCOPES = ./pki ./controlplane/fleet ./controlplane/queue ./agent/internal/worker
export MUTATION_EFFICACY ?= 85
export MUTATION_COVERAGE ?= 80

mutation: ## mutation-test pki, the fleet, the queue and the agent's worker; fail below 85 % efficacy or 80 % covered
	$(GO) run ./internal/pgcluster/withpg -- scripts/mutation.sh $(MUTATION_SCOPES)

SANDBOX_DIR ?= /tmp/runmesh-sandbox
# Tests that run inside the sandbox, as the runmesh user.
E2E_PACKAGES = ./agent/internal/runtime
# Tests that run here and drive an agent inside the sandbox.
E2E_HOST_PACKAGES = ./cmd/runmesh-agent
E2E_HOST_TESTS = TestJobsInTheSandbox|TestGPUsInTheSandbox|TestSessionsInTheSandbox

test-e2e: ## the agent against a real systemd and rootless Podman, in agent/sandbox (needs root)
	@# Each package's directory is copied next to its test binary: the tests read testdata from there, and
	@# the runmesh user inside may not be able to reach this checkout (/tmp is private in the sandbox).
	@rm -rf $(SANDBOX_DIR)/bin $(SANDBOX_DIR)/src && mkdir -p $(SANDBOX_DIR)/bin $(SANDBOX_DIR)/src && \
		for p in $(E2E_PACKAGES); do \
		$(GO) test -c -o $(SANDBOX_DIR)/bin/$$(basename $$p).test $$p || exit 1; \
		cp -r $$p $(SANDBOX_DIR)/src/$$(basename $$p); done && \
		$(GO) build -ldflags "$(LDFLAGS)" -o $(SANDBOX_DIR)/bin/runmesh-agent ./cmd/runmesh-agent && \
		$(GO) build -tags nvmlmock,$(PODMAN_TAGS) -ldflags "$(LDFLAGS)" -o $(SANDBOX_DIR)/bin/runmesh-agent-nvmlmock ./cmd/runmesh-agent && \
		chmod -R a+rX $(SANDBOX_DIR)/bin $(SANDBOX_DIR)/src
	@# A sandbox that is already up (someone's, by hand) is refused by up and left alone.
	@export RUNMESH_SANDBOX_DIR=$(SANDBOX_DIR); agent/sandbox/sandbox.sh up || exit 1; \
		trap 'agent/sandbox/sandbox.sh down' EXIT; \
		agent/sandbox/sandbox.sh user sh -c 'for p; do echo "e2e: $$p"; \
			(cd $(SANDBOX_DIR)/src/$$p && RUNMESH_SANDBOX=1 exec $(SANDBOX_DIR)/bin/$$p.test -test.count=1 -test.v) || exit 1; \
			done' sh $(notdir $(E2E_PACKAGES)) && \
		echo "e2e: $(E2E_HOST_PACKAGES) (agent in the sandbox, server here)" && \
		RUNMESH_SANDBOX_UP=1 $(GO) test -count=1 -timeout 20m -v -run '$(E2E_HOST_TESTS)' $(E2E_HOST_PACKAGES)

build: ## build the binaries into bin/
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./cmd/...

# The bundle is committed (graph/playground/dist), so build and test need no npm.
playground: ## rebuild the GraphiQL bundle (needs npm)
	graph/playground/build.sh

packages: ## the runmesh-agent and runmesh-server packages, .deb and .rpm, into dist/ (the version from git)
	packaging/build.sh dist

# Debian's lintian, rpm and shellcheck: installed here when missing and we are root, else named.
PACKAGE_TOOLS = lintian rpm shellcheck
MAINTAINER_SCRIPTS = $(wildcard packaging/*/postinst packaging/*/prerm packaging/*/postrm)

lint-packages: packages ## lintian on the .debs (no errors; overrides explained), the .rpms' files and scripts, shellcheck
	@need=; for p in $(PACKAGE_TOOLS); do dpkg -s $$p >/dev/null 2>&1 || need="$$need $$p"; done; 		if [ -n "$$need" ]; then 		if [ "$$(id -u)" = 0 ]; then echo "installing$$need"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need >/dev/null || exit 1; 		else echo "lint-packages needs:$$need (apt-get install$$need)"; exit 1; fi; fi
	lintian --fail-on error,warning dist/*.deb
	@for r in dist/*.rpm; do echo "== $$r"; rpm -qp --list --scripts $$r || exit 1; done
	shellcheck -s sh $(MAINTAINER_SCRIPTS) packaging/build.sh packaging/version.sh
	shellcheck packaging/test.sh

test-packages: ## install, use, upgrade under a running job, remove and purge the .debs in the systemd sandbox (needs root)
	packaging/test.sh

demo: build ## the whole path on this machine: dev server, an agent in the systemd sandbox, one job (needs root)
	scripts/demo.sh

bench: bench-pki bench-heartbeat bench-lease bench-start bench-data bench-interactive ## every benchmark (each starts its own PostgreSQL and server)

# The benchmarks are a module of their own (bench/), so that River, the peer
# they compare with, is no dependency of the product.
BENCH = $(GO) -C bench run ./cmd/runmesh-bench

bench-pki: ## approval → certificate latency and mTLS handshakes per second
	$(BENCH) pki

# BASELINE=REF: REF's runmesh-server and the working tree's take turns at a
# fixed RUNNERS (default 10,000), and it fails when the median of the pairs'
# server + PostgreSQL CPU per heartbeat, new/old, is above MAX_RATIO (1.05).
bench-heartbeat: $(if $(BASELINE),,build) ## the most runners heartbeating every 10 s over mTLS with p99 < 100 ms; BASELINE=REF: CPU per heartbeat against REF, taking turns
	$(if $(BASELINE),GO='$(GO)' scripts/bench-turns.sh heartbeat '$(BASELINE)',$(BENCH) heartbeat -server $(CURDIR)/bin/runmesh-server)

chaos: build ## faults under load against two real replicas: a replica killed, PostgreSQL restarted and down past the lease, a runner frozen, results twice, forged results
	$(BENCH) chaos -server $(CURDIR)/bin/runmesh-server $(CHAOSFLAGS)

# BASELINE=REF: the build REF and the working tree take turns (PAIRS pairs of
# whole runs, default 3), and it fails when the median of the pairs' ratios,
# new/old, is below MIN_RATIO (default 0.95). LEASEFLAGS go to every run.
LEASEFLAGS ?=

bench-lease: ## queue throughput and submit-to-lease latency, against River on the same PostgreSQL; BASELINE=REF: against REF, taking turns
	$(if $(BASELINE),LEASEFLAGS='$(LEASEFLAGS)' GO='$(GO)' scripts/bench-turns.sh '$(BASELINE)',$(BENCH) lease $(LEASEFLAGS))

bench-data: ## a job's input fetch and output upload through the agent's mover vs curl of the same presigned URLs (goal ≥ 0.9)
	$(BENCH) data

bench-start: build ## lease held → job container running vs plain podman run; the agent's idle RSS and CPU (needs root)
	@mkdir -p $(SANDBOX_DIR)/bin && $(GO) -C bench build -o $(SANDBOX_DIR)/bin/runmesh-bench ./cmd/runmesh-bench && \
		chmod a+rx $(SANDBOX_DIR)/bin/runmesh-bench
	RUNMESH_SANDBOX_DIR=$(SANDBOX_DIR) agent/sandbox/sandbox.sh run $(SANDBOX_DIR)/bin/runmesh-bench start
	@echo "bench-start: the demo's agent, enrolled and after one job, idling for 60 s"
	@RUNMESH_SANDBOX_DIR=$(SANDBOX_DIR) scripts/demo.sh --idle 60 > /tmp/runmesh-bench-idle.log 2>&1 || \
		{ cat /tmp/runmesh-bench-idle.log; exit 1; }; grep '^agent idle' /tmp/runmesh-bench-idle.log

bench-interactive: ## keystroke round trip (goal p99 < 20 ms) and runmesh cp vs podman cp of 256 MiB (goal ≥ 0.5), across two replicas (needs root)
	@mkdir -p $(SANDBOX_DIR)/bin && $(GO) build -ldflags "$(LDFLAGS)" -o $(SANDBOX_DIR)/bin/runmesh-agent ./cmd/runmesh-agent && \
		chmod -R a+rX $(SANDBOX_DIR)/bin
	@export RUNMESH_SANDBOX_DIR=$(SANDBOX_DIR); agent/sandbox/sandbox.sh up || exit 1; \
		trap 'agent/sandbox/sandbox.sh down' EXIT; \
		RUNMESH_SANDBOX_UP=1 RUNMESH_BENCH=interactive $(GO) test -count=1 -timeout 20m -v -run '^TestInteractiveBenchmark$$' ./cmd/runmesh-agent

check: verify lint test ## generated code, lint and tests: run before you push
