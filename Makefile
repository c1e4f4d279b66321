# lockgateway — `make help` lists the targets.

GO      ?= go
BIN     := bin/lockgateway
IMAGE   ?= lockgateway:dev
COMPOSE ?= docker-compose
# Stamped into lockgateway.Version; "dev" outside a git checkout.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/lockgateway/lockgateway.Version=$(VERSION)

# Every recipe line runs in bash with errexit and pipefail, so a failing step
# in the middle of a pipe or a multi-line recipe stops the build.
SHELL       := /bin/bash
.SHELLFLAGS := -euo pipefail -c

.DEFAULT_GOAL := help

.PHONY: help run build test deps lint bench docker clean

help:
	@echo 'make run     serve on :8080 with the memory backend (nothing to install)'
	@echo 'make build   static binary in $(BIN)'
	@echo 'make test    install missing test tools (as root), then go test -race ./...'
	@echo 'make lint    gofmt and go vet'
	@echo 'make bench   benchmarks'
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
test: deps
	$(COMPOSE) -f docker-compose.yml config -q
	CGO_ENABLED=1 $(GO) test -race ./...

# Tools the tests need beyond Go:
#  - redis-server: the Redis and Redlock tests run real servers (Debian puts
#    it in /usr/bin). REDIS_SERVER=/path/to/redis-server skips the install.
#  - a C compiler: -race needs cgo, and Go turns cgo off without one.
#  - docker-compose: to check docker-compose.yml.
#  - nginx (with auth_request, as Debian's has): examples/nginx runs a real
#    one. Debian puts it in /usr/sbin, which a user's PATH may lack.
#    NGINX=/path/to/nginx skips the install.
# --no-install-recommends keeps docker-compose from pulling in the whole
# Docker engine; only the compose file parser is needed here.
deps:
	@missing=(); \
	if [[ -z "$${REDIS_SERVER:-}" ]] && ! command -v redis-server >/dev/null; then missing+=(redis-server); fi; \
	if ! command -v "$$($(GO) env CC)" >/dev/null; then missing+=(gcc libc6-dev); fi; \
	if [[ "$(COMPOSE)" == docker-compose ]] && ! command -v docker-compose >/dev/null; then missing+=(docker-compose); fi; \
	if [[ -z "$${NGINX:-}" ]] && ! command -v nginx >/dev/null && ! test -x /usr/sbin/nginx; then missing+=(nginx); fi; \
	if (( $${#missing[@]} == 0 )); then exit 0; fi; \
	if [[ "$$(id -u)" != 0 ]]; then \
		echo "make test needs: $${missing[*]}" >&2; \
		echo "Install them (Debian/Ubuntu): sudo apt-get install -y $${missing[*]}" >&2; \
		echo "or run make test as root, which installs them itself." >&2; \
		echo "(Or point REDIS_SERVER at a redis-server binary, NGINX at an nginx binary, or set COMPOSE to another compose command.)" >&2; \
		exit 1; \
	fi; \
	echo "installing $${missing[*]}"; \
	apt-get update; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$${missing[@]}"

lint:
	@unformatted="$$(gofmt -l .)"; \
	if [[ -n "$$unformatted" ]]; then echo "gofmt -w these files:" >&2; echo "$$unformatted" >&2; exit 1; fi
	$(GO) vet ./...

# -run '^$$' skips the tests so only benchmarks run.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# BuildKit for the Dockerfile's cache mounts (already the default on Docker 23+).
docker:
	DOCKER_BUILDKIT=1 docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

clean:
	rm -rf bin dist
