#!/usr/bin/env bash
# Builds the fencing proxy and the ComfyUI simulator as static binaries and their
# images, locally (nothing is pulled): aetherium/fenceproxy and aetherium/comfysim
# (FROM scratch), and aetherium/comfysim-video: the media image
# (aetherium-media:latest, built by scripts/images.sh, which has ffmpeg) with the
# same comfysim binary added, because the simulator runs ffmpeg to encode a video
# workflow's H.264 MP4 (Go has no H.264 encoder without cgo). These are the images
# the streams.leases.services examples name (docs/reference/tools/comfyui.md); a real ComfyUI replaces only
# the comfysim and comfysim-video images.
#
# Idempotent like sandbox/images/build.sh: each image carries a hash of its inputs
# (the Go sources of the main module the command links, go.mod, go.sum, the go
# version, this script, and for comfysim-video the media image's id) and is
# rebuilt only when that hash changed. AETHERIUM_IMAGE_FORCE=1 rebuilds anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
media=aetherium-media:latest
label=io.aetherium.image.hash

# inputs_hash <package>: what decides the command's binary.
inputs_hash() {
	{
		"$GO" version
		cat go.mod go.sum "$0"
		# The main module's packages the command links, file by file (the other
		# modules are pinned by go.sum).
		"$GO" list -deps -f '{{if .Module}}{{if .Module.Main}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{range .EmbedFiles}} {{.}}{{end}}{{end}}{{end}}' "$1" |
			while read -r dir files; do
				for f in $files; do
					printf '%s\n' "${dir#"$PWD"/}/$f"
					cat "$dir/$f"
				done
			done
	} | sha256sum | cut -c1-16
}

current() { # current <image> <hash>
	[[ "${AETHERIUM_IMAGE_FORCE:-}" != 1 ]] &&
		[[ "$(docker image inspect -f "{{index .Config.Labels \"$label\"}}" "$1" 2>/dev/null || true)" == "$2" ]]
}

out=bin/gpu
mkdir -p "$out"
declare -A hash
for name in fenceproxy comfysim; do
	hash[$name]="$(inputs_hash "./cmd/$name")"
done
media_id="$(docker image inspect -f '{{.Id}}' "$media" 2>/dev/null || true)"
video_hash=""
if [[ -n "$media_id" ]]; then
	video_hash="$(printf '%s\n%s\n' "${hash[comfysim]}" "$media_id" | sha256sum | cut -c1-16)"
fi

if ! current aetherium/fenceproxy "${hash[fenceproxy]}" || ! current aetherium/comfysim "${hash[comfysim]}" ||
	{ [[ -n "$video_hash" ]] && ! current aetherium/comfysim-video "$video_hash"; }; then
	CGO_ENABLED=0 "$GO" build -trimpath -ldflags='-s -w' -o "$out/" ./cmd/fenceproxy ./cmd/comfysim
fi
for name in fenceproxy comfysim; do
	if current "aetherium/$name" "${hash[$name]}"; then
		echo "gpu-images: aetherium/$name is current (${hash[$name]})"
		continue
	fi
	printf 'FROM scratch\nCOPY %s /%s\nLABEL %s=%s\nENTRYPOINT ["/%s"]\n' "$name" "$name" "$label" "${hash[$name]}" "$name" |
		docker build -q -t "aetherium/$name" -f - "$out" >/dev/null
	echo "gpu-images: built aetherium/$name (${hash[$name]})"
done

if [[ -z "$media_id" ]]; then
	echo "gpu-images: aetherium/comfysim-video needs the media image $media (it has ffmpeg), which is missing: run 'make images' (scripts/images.sh) first" >&2
	exit 1
fi
if current aetherium/comfysim-video "$video_hash"; then
	echo "gpu-images: aetherium/comfysim-video is current ($video_hash)"
	exit 0
fi
# The media image's user (10001) runs the simulator; ffmpeg writes its temporary
# MP4 under /tmp.
printf 'FROM %s\nCOPY comfysim /usr/local/bin/comfysim\nLABEL %s=%s\nEXPOSE 8188\nENTRYPOINT ["/usr/local/bin/comfysim"]\n' "$media" "$label" "$video_hash" |
	docker build -q -t aetherium/comfysim-video -f - "$out" >/dev/null
echo "gpu-images: built aetherium/comfysim-video ($video_hash) from $media"
