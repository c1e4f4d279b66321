# syntax=docker/dockerfile:1
# BuildKit is needed for the cache mounts: the default builder since Docker 23;
# with older Docker (or docker-compose 1.29 on top of it) set DOCKER_BUILDKIT=1.

FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so editing code does not re-download modules.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG VERSION=dev
# Static (no cgo) so it runs on distroless/static; -trimpath and -s -w keep
# build paths and debug tables out of the image.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags="-s -w -X github.com/lockgateway/lockgateway.Version=${VERSION}" \
      -o /out/lockgateway ./cmd/lockgateway

# distroless/static: CA certificates, tzdata and /etc/passwd with a nonroot
# user (65532), and nothing else: no shell to exploit.
FROM gcr.io/distroless/static-debian12:nonroot
# OCI annotations; the license is the repository's LICENSE.
LABEL org.opencontainers.image.title="lockgateway" \
      org.opencontainers.image.description="Leases (locks with a TTL) and fencing tokens over HTTP" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/lockgateway /usr/local/bin/lockgateway
USER nonroot:nonroot
# A container's loopback reaches nobody, so the image listens on every
# interface; the gateway then refuses to start without API keys
# (LOCKGW_API_KEYS_FILE) or LOCKGW_ALLOW_UNAUTHENTICATED=true, and says so.
ENV LOCKGW_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/lockgateway"]
