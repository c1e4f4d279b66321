# lockgateway — `make help` lists the targets.

GO      ?= go
BIN     := bin/lockgateway
IMAGE   ?= lockgateway:dev
COMPOSE ?= docker-compose
PROMTOOL ?= promtool
# Stamped into lockgateway.Version; "dev" outside a git checkout.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/lockgateway/lockgateway.Version=$(VERSION)

# Every recipe line runs in bash with errexit and pipefail, so a failing step
# in the middle of a pipe or a multi-line recipe stops the build.
SHELL       := /bin/bash
.SHELLFLAGS := -euo pipefail -c

.DEFAULT_GOAL := help

.PHONY: help run build test test-short deps lint bench docker clean

help:
	@echo 'make run     serve on 127.0.0.1:8080 with the memory backend (nothing to install)'
	@echo 'make build   static binary in $(BIN)'
	@echo 'make test    install missing test tools (as root), then go test -race ./..., and the protocol simulator without -race (.ci/gotest)'
	@echo 'make test-short   go test -short ./...: only Go needed, under a minute (no redis-server, nginx, chromium)'
	@echo 'make lint    gofmt and go vet'
	@echo 'make bench   benchmarks'
	@echo 'make sim     deterministic protocol simulator on fresh seeds (SIM_DURATION=10m make sim)'
	@echo 'make chaos   fault-injection suite (~11 min): real Redis and gateway processes; writes docs/chaos-report.md'
	@echo 'make generate     regenerate client/lockgateway.gen.go from openapi.yaml'
	@echo 'make sdk-check    lint openapi.yaml (Redocly), generate a TypeScript client from it (npm), run it and the docs'"'"' TypeScript example against a gateway'
	@echo 'make docker  build the $(IMAGE) image'
	@echo 'make clean   remove build output'

run:
	$(GO) run ./cmd/lockgateway

# CGO_ENABLED=0: one static binary that runs on any Linux, distroless included.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="$(LDFLAGS)" -o $(BIN) ./cmd/lockgateway

# The Redis tests start their own redis-server processes on free loopback
# ports and never touch port 6379, so a Redis service that apt may have
# started alongside the package neither helps nor disturbs them. The same
# goes for nginx: examples/nginx runs its own on free ports, never port 80.
# .ci/gotest runs go test -race ./... as several go test processes side by
# side, then the protocol simulator (without -race).
test: deps
	$(COMPOSE) -f docker-compose.yml config -q
	$(COMPOSE) -f docker-compose.yml --profile sentinel --profile cluster config -q
	$(PROMTOOL) check rules deploy/prometheus/rules.yml
	$(PROMTOOL) test rules deploy/prometheus/rules_test.yml
	GO=$(GO) .ci/gotest

# The layer that needs only Go: pure logic, the handlers on the memory
# backend, and the protocol simulator. Every test that starts a real process
# (redis-server, nginx, chromium, system commands) skips itself under -short,
# saying that make test runs it; nothing else is left out.
test-short:
	$(GO) test -short ./...

# Tools the tests need beyond Go:
#  - redis-server: the Redis and Redlock tests run real servers (Debian puts
#    it in /usr/bin). REDIS_SERVER=/path/to/redis-server skips the install.
#  - valkey-server: the same suites run on Valkey too (lockstore/redis/valkey_test.go).
#    Debian 12 has it in bookworm-backports only: as root on bookworm, the
#    backports source is added when missing, and only valkey-server comes
#    from it (-t bookworm-backports); Debian 13 and later have it in main.
#    VALKEY_SERVER=/path/to/valkey-server skips the install.
#  - a C compiler: -race needs cgo, and Go turns cgo off without one.
#  - docker-compose: to check docker-compose.yml.
#  - nginx (with auth_request, as Debian's has): examples/nginx runs a real
#    one. Debian puts it in /usr/sbin, which a user's PATH may lack.
#    NGINX=/path/to/nginx skips the install.
#  - promtool (Debian's prometheus package): checks and unit-tests the alert
#    rules in deploy/prometheus/. PROMTOOL=/path/to/promtool skips the
#    install. The package's Prometheus service is not needed; on a machine
#    with systemd, apt starts it: `systemctl disable --now prometheus`.
#  - chromium (Debian's, headless): ui/ drives the dashboard in a real
#    browser. LOCKGW_CHROMIUM=/path/to/chromium (or Chrome) skips the install.
# --no-install-recommends keeps docker-compose from pulling in the whole
# Docker engine; only the compose file parser is needed here.
deps:
	@missing=(); \
	if [[ -z "$${REDIS_SERVER:-}" ]] && ! command -v redis-server >/dev/null; then missing+=(redis-server); fi; \
	if ! command -v "$$($(GO) env CC)" >/dev/null; then missing+=(gcc libc6-dev); fi; \
	if [[ "$(COMPOSE)" == docker-compose ]] && ! command -v docker-compose >/dev/null; then missing+=(docker-compose); fi; \
	if [[ -z "$${NGINX:-}" ]] && ! command -v nginx >/dev/null && ! test -x /usr/sbin/nginx; then missing+=(nginx); fi; \
	if [[ "$(PROMTOOL)" == promtool ]] && ! command -v promtool >/dev/null; then missing+=(prometheus); fi; \
	if [[ -z "$${LOCKGW_CHROMIUM:-}" ]] && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null; then missing+=(chromium); fi; \
	valkey=(); \
	if [[ -z "$${VALKEY_SERVER:-}" ]] && ! command -v valkey-server >/dev/null; then valkey=(valkey-server); fi; \
	if (( $${#missing[@]} + $${#valkey[@]} == 0 )); then exit 0; fi; \
	codename=$$(. /etc/os-release 2>/dev/null && echo "$${VERSION_CODENAME:-}"); \
	if [[ "$$(id -u)" != 0 ]]; then \
		echo "make test needs: $${missing[*]}$${missing[*]:+ }$${valkey[*]}" >&2; \
		if (( $${#missing[@]} )); then echo "Install them (Debian/Ubuntu): sudo apt-get install -y $${missing[*]}" >&2; fi; \
		if (( $${#valkey[@]} )) && [[ "$$codename" == bookworm ]]; then \
			echo "valkey-server (Debian 12): echo 'deb http://deb.debian.org/debian bookworm-backports main' | sudo tee /etc/apt/sources.list.d/bookworm-backports.list; sudo apt-get update; sudo apt-get install -y -t bookworm-backports valkey-server" >&2; \
		elif (( $${#valkey[@]} )); then echo "valkey-server: sudo apt-get install -y valkey-server (Debian 13+), or brew install valkey" >&2; fi; \
		echo "or run make test as root, which installs them itself." >&2; \
		echo "(Or point REDIS_SERVER at a redis-server binary, VALKEY_SERVER at a valkey-server, NGINX at an nginx binary, PROMTOOL at a promtool, LOCKGW_CHROMIUM at a Chromium, or set COMPOSE to another compose command.)" >&2; \
		exit 1; \
	fi; \
	echo "installing $${missing[*]}$${missing[*]:+ }$${valkey[*]}"; \
	target=(); \
	if (( $${#valkey[@]} )) && [[ "$$codename" == bookworm ]]; then \
		target=(-t bookworm-backports); \
		if ! grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then \
			echo "adding the bookworm-backports apt source, for valkey-server"; \
			echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/bookworm-backports.list; \
		fi; \
	fi; \
	apt-get update; \
	if (( $${#missing[@]} )); then DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$${missing[@]}"; fi; \
	if (( $${#valkey[@]} )); then DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$${target[@]}" valkey-server; fi

lint:
	@unformatted="$$(gofmt -l .)"; \
	if [[ -n "$$unformatted" ]]; then echo "gofmt -w these files:" >&2; echo "$$unformatted" >&2; exit 1; fi
	$(GO) vet ./...

# tools/benchmark (lockbench) starts its own redis-servers, gateways,
# baseline and (when Debian's etcd-server package is installed) etcd on free
# loopback ports, and prints one table: ~6.5 min with the defaults (11 rows ×
# 10 s, in two interleaved rounds of 5 s after 1 s of warm-up; three flood
# rows; issue 17's concurrency curve, Redis memory per lock and 500 waiters,
# about a minute together; issue 28's 10 000 holds on Redis and on Redlock,
# about two minutes, which need a hard open-files limit above 10 256).
# Results land in bench-results/<time>.json and .svg.
# BENCH_ARGS passes flags, e.g. BENCH_ARGS='-rows gateway,baseline -duration 5s'.
# The etcd rows need Debian's etcd-server (etcd 3.4): as root it is
# installed when missing, as make test installs its tools; otherwise
# lockbench skips those rows and says so. ETCD=/path/to/etcd skips the
# install.
BENCH_ARGS ?=
bench: bench-deps
	$(GO) run ./tools/benchmark $(if $(ETCD),-etcd $(ETCD)) $(BENCH_ARGS)

.PHONY: bench-deps
bench-deps:
	@if [[ -z "$${ETCD:-}" ]] && ! command -v etcd >/dev/null && ! test -x /usr/bin/etcd; then \
		if [[ "$$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then \
			echo "installing etcd-server (the etcd rows of make bench)"; \
			apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends etcd-server; \
		else \
			echo "make bench: no etcd, so its rows are skipped; install it: sudo apt-get install -y etcd-server" >&2; \
		fi; \
	fi

# A few seconds: every row for 300 ms with 4 clients (also part of make test).
.PHONY: bench-smoke
bench-smoke:
	$(GO) test -count=1 -run TestSmoke -v ./tools/benchmark

# The fault-injection suite (tests/robustness/, build tag chaos; the harness
# and checkers are in tools/chaos/): real redis-server and gateway processes
# (the binary is built from the tree) through kills, pauses, restarts, clock
# steps, latency and dropped connections, about 21 minutes on 2 cores, one scenario at
# a time. It prints a table and writes it to docs/chaos-report.md.
# CHAOS_RUNS=N runs each scenario N times (default 2).
# Needs what make test needs: redis-server, and a C compiler for the clock
# shim it preloads into Redis. (A 10-second smoke of it runs in make test.)
.PHONY: chaos
chaos: deps
	CHAOS_REPORT=docs/chaos-report.md $(GO) test -tags chaos -p 1 -count=1 -timeout 30m -v ./tests/robustness/

# BuildKit for the Dockerfile's cache mounts (already the default on Docker 23+).
docker:
	DOCKER_BUILDKIT=1 docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

clean:
	rm -rf bin dist

# The Go client (client/) is generated from openapi.yaml by the pinned
# oapi-codegen in client/generate.go; its test fails when the committed
# code is stale.
.PHONY: generate sdk-check
generate:
	$(GO) generate ./client

# Needs node and npm (Node 20+); the packages are pinned in
# sdk/ts/package-lock.json and installed into sdk/ts/node_modules.
sdk-check:
	GO=$(GO) sdk/ts/check.sh

# The deterministic protocol simulator (issue 26; lockstore/sim_*_test.go):
# fresh seeds, from the clock, until SIM_DURATION passes. A failing seed
# prints its trace and the command that replays it. `go test -short` runs a
# fixed 100 000 requests of it; this runs as long as asked. -cpu 1: one
# goroutine runs at a time, and hands over more cheaply on one P (.ci/gotest).
SIM_DURATION ?= 1m
.PHONY: sim
sim:
	$(GO) test ./lockstore/redis ./lockstore/redlock -run 'TestSimRedis$$|TestSimRedlock$$' -count=1 -cpu 1 -timeout 0 -v -sim.duration $(SIM_DURATION) -sim.first "$$(date +%s)000"
