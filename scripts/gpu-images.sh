#!/usr/bin/env bash
# Builds the fencing proxy and the ComfyUI simulator as static binaries and one
# FROM-scratch image each, locally (nothing is pulled): aetherium/fenceproxy and
# aetherium/comfysim, the images the README's streams.leases.services example
# names. A real ComfyUI replaces only the comfysim image.
set -euo pipefail
cd "$(dirname "$0")/.."
out=bin/gpu
mkdir -p "$out"
CGO_ENABLED=0 "${GO:-go}" build -trimpath -ldflags='-s -w' -o "$out/" ./cmd/fenceproxy ./cmd/comfysim
for name in fenceproxy comfysim; do
	printf 'FROM scratch\nCOPY %s /%s\nENTRYPOINT ["/%s"]\n' "$name" "$name" "$name" |
		docker build -q -t "aetherium/$name" -f - "$out"
done
