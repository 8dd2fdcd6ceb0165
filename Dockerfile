# syntax=docker/dockerfile:1
# One image with every Slackline binary, built statically (CGO off).
#   docker build -t slackline .
# Binaries run as the non-root user 65532 by default; the agent must run as
# root with the capabilities listed in docs/operators.md (the DaemonSet in
# deploy/kubernetes sets them): it creates cgroups, loads eBPF programs and
# starts tasks as other users.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# Every command and example, and the probe the manifests run. The eBPF
# objects are committed (bpf/*_bpfel.o): no clang here.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags="-s -w" -o /out/ ./cmd/... ./examples/... ./deploy/healthcheck \
 && mv /out/healthcheck /out/slackline-healthcheck

# Debian rather than distroless: the agent's tasks run in this filesystem
# and need a shell and the `nobody` user; nsenter (util-linux) starts the
# agent in the host's cgroup namespace.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates util-linux \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
EXPOSE 5050 5051 5060
# No default command: run slackline-coordinator, slackline-agent,
# slackline-jobs (the job service, port 5060), ... by name.
