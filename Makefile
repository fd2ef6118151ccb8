# The two set-up commands: `make demo` runs the main job end to end, `make test`
# runs the tests. Both install and start Redis and PostgreSQL (Debian's packages)
# when they are absent.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go

.PHONY: docs demo test services sandbox-image images deploy-images gpu-images build vet compose-check compose-test clean bench drills fuzz

# The binary as the deployment ships it (static, -trimpath): the same build
# configuration as the compose images, the GPU services' and the test helpers'
# binaries, so a cold machine compiles the dependencies once for all of them
# rather than once more with cgo.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/aetherium ./cmd/aetherium

services:
	bash scripts/services.sh

# The sandbox image run_shell uses, built locally (FROM scratch + busybox-static).
sandbox-image:
	@if docker info >/dev/null 2>&1; then bash sandbox/build-image.sh; \
	else echo "sandbox-image: no Docker engine answers; run_shell will report it has no sandbox"; fi

# The image family (scripts/images.sh): one base, Debian bookworm by debootstrap
# imported without a registry (sandbox/images/base.packages), then each member one
# layer over it, side by side: the sandbox images (sandbox/images/<name>.packages)
# and the compose deployment's root filesystem (deploy/images/deploy-base.packages).
# Each build is skipped while its hash (the base's, the package list, the build
# script, the image's <name>.extra.sh inputs, e.g. the host's Go) matches; a cold
# build takes minutes (sandbox/README.md).
images:
	bash scripts/images.sh

# The images docker-compose.yml runs, without a registry (scripts/deploy-images.sh):
# the family's deploy-base member (Debian's redis-server, postgresql, prometheus,
# e2fsprogs) under aetherium-redis/-postgres/-prometheus, aetherium-worker (base + the static
# binary) and aetherium (FROM scratch + the binary). Skipped while their hashes match.
deploy-images:
	GO=$(GO) bash scripts/deploy-images.sh

# The compose deployment end to end (deploy/compose_test.go, root, a few minutes):
# builds the images, starts docker-compose.yml with 3 workers, kills one under load,
# scales to 5, checks and removes everything.
compose-test:
	AETHERIUM_COMPOSE_TEST=1 $(GO) test -count=1 -run TestCompose -timeout 20m -v ./deploy/...

# The fencing proxy and the ComfyUI simulator images (static Go binaries:
# aetherium/fenceproxy, aetherium/comfysim FROM scratch, aetherium/comfysim-video
# FROM the media image, so run `make images` first). Skipped while current.
gpu-images:
	@if docker info >/dev/null 2>&1; then GO=$(GO) bash scripts/gpu-images.sh; \
	else echo "gpu-images: no Docker engine answers"; fi

# The generated reference pages (docs/reference/configuration-keys.md, tool-catalog.md,
# http-api-reference.md) from the Config structs, the tool registrations and the OpenAPI
# document; internal/docgen's test fails when a committed page is stale.
docs:
	$(GO) run ./internal/docgen

# TRACE=1: the fleet traces the run to the local Jaeger (scripts/jaeger.sh, built
# once into a cache) and the demo prints the run's trace URL; without it the demo
# neither builds nor starts Jaeger.
TRACE ?=
demo: export AETHERIUM_JAEGER = $(if $(filter 1 true yes,$(TRACE)),on,off)
demo: services sandbox-image build
	TRACE=$(TRACE) bash scripts/demo.sh

# -race: vet type-checks against the race-instrumented build the tests use, so the
# dependencies compile once for both (a plain `go vet` compiles every package a
# second time without -race: 13 minutes of a cold machine's 2 cores).
vet:
	$(GO) vet -race ./...

# go test -json through internal/testtimes, which prints what go test would (each
# package's ok/FAIL line, failed tests' output), records the stream in TESTJSON and
# ends with the ten slowest packages and tests and the counts of tests passed,
# skipped and failed. pipefail: go test's status stands beside the tool's.
# -vet=off: `make vet` (a prerequisite) has just run every analyzer; go test's own
# subset is a separate action with its own cache key, so it type-checked every
# package and test variant a second time.
# -ldflags=-w: test binaries without DWARF (a quarter less link time for each of
# the ~65 race-linked binaries of a cold run; stacks and race reports do not use it).
TESTJSON ?= bin/test.json
test: services sandbox-image images vet
	@mkdir -p $(dir $(TESTJSON))
	set -o pipefail; $(GO) test -json -race -vet=off -ldflags=-w -count=1 -timeout 20m ./... 2>&1 | $(GO) run ./internal/testtimes -o $(TESTJSON)

# Every Go fuzz target in turn (scripts/fuzz.sh finds them), FUZZTIME each: the
# default 1m is about a quarter of an hour; `make fuzz FUZZTIME=5s` is a quick pass.
# FUZZBUDGET (CI: 150s) replaces FUZZTIME with one wall-clock budget for all the
# targets together, split across them. Fails if any target fails; a crasher lands
# in <pkg>/testdata/fuzz/<Name>/. The services are for the api target, which fuzzes
# a running fleet.
FUZZTIME ?= 1m
FUZZBUDGET ?=
fuzz: services
	FUZZTIME=$(FUZZTIME) FUZZBUDGET=$(FUZZBUDGET) GO=$(GO) bash scripts/fuzz.sh

compose-check:
	@if command -v docker-compose >/dev/null 2>&1; then docker-compose -f docker-compose.yml config -q && echo "docker-compose.yml: valid"; \
	elif docker compose version >/dev/null 2>&1; then docker compose -f docker-compose.yml config -q && echo "docker-compose.yml: valid"; \
	else echo "compose-check: no docker-compose here, skipped"; fi

# Quota workspaces under data/ are mounts (on loop devices): unmount them first.
clean:
	@awk '{print $$5}' /proc/self/mountinfo | grep '^$(CURDIR)/data/' | sort -r | xargs -r umount
	rm -rf bin data

# Throughput, hop latency and idle cost on the local Redis and PostgreSQL (about six
# minutes, two of them idle workers measured for a minute at each poll setting),
# then the governor (section 8) and one 500-turn session (section 9, on a private
# PostgreSQL; about four minutes on the full-history sessions of 2026-12-06);
# prints the table and writes cmd/bench/results/latest.{md,json}.
bench: services build
	$(GO) run ./cmd/bench -bin bin/aetherium

# Fault drills on real processes (kill -9, Redis and PostgreSQL restarts, load,
# Sentinel and Cluster failovers, a partitioned worker; drill 8 needs root);
# sizes from DRILL_RUNS, DRILL_MANY, DRILL_LOAD_SECONDS (CI runs them small).
drills: services build
	$(GO) run ./cmd/drills -bin bin/aetherium
