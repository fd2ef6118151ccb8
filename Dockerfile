# The one binary, every role. Build: docker build -t aetherium .
# (Needs the golang and debian images from a registry. On a machine without one,
# `make deploy-images` builds what docker-compose.yml runs: deploy/images/.)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/aetherium ./cmd/aetherium

# A worker image for docker-compose.yml (AETHERIUM_WORKER_IMAGE) when a registry is at
# hand: quota workspaces need mkfs.ext4 and root (the container gets SYS_ADMIN and the
# loop devices). Build: docker build --target worker -t aetherium-worker .
FROM debian:bookworm-slim AS worker
RUN apt-get update && apt-get install -y --no-install-recommends e2fsprogs && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/aetherium /usr/local/bin/aetherium
COPY templates /app/templates
COPY knowledge/packs /app/knowledge/packs
COPY config /app/config
WORKDIR /app
ENV AETHERIUM_TEMPLATES=/app/templates AETHERIUM_WORKSPACES=/data/workspaces
ENTRYPOINT ["/usr/local/bin/aetherium"]

# Every other role (the default target).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/aetherium /usr/local/bin/aetherium
COPY templates /app/templates
COPY knowledge/packs /app/knowledge/packs
COPY config /app/config
WORKDIR /app
ENV AETHERIUM_TEMPLATES=/app/templates AETHERIUM_WORKSPACES=/data/workspaces
USER nonroot
ENTRYPOINT ["/usr/local/bin/aetherium"]
