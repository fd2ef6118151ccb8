#!/usr/bin/env bash
# The trace receiver of the tests and of `make demo TRACE=1` (docs/traces.md):
# Jaeger v1.75.0 (its v2 binary, cmd/jaeger), pinned by the module of its own in
# scripts/jaeger (a tool directive: the fleet's go.mod does not carry Jaeger's
# dependency graph).
#
#   scripts/jaeger.sh build   builds it, static (CGO_ENABLED=0), -trimpath and
#                             stripped, into a cache keyed by a hash of that
#                             module's go.mod and go.sum and the Go version; a
#                             cached build returns at once. .ci/run runs it in
#                             the background beside `go vet -race ./...`.
#   scripts/jaeger.sh start   builds it if needed and starts it on loopback, if
#                             nothing answers yet: OTLP in (gRPC 127.0.0.1:4317,
#                             HTTP 127.0.0.1:4318), the query API and UI out
#                             (http://127.0.0.1:16686), traces in memory
#                             (scripts/jaeger/config.yaml). Idempotent.
#   scripts/jaeger.sh path    prints the binary's path (built or not).
#
# scripts/services.sh runs `start` when it is built, or always with
# AETHERIUM_JAEGER=on (and under CI=true); AETHERIUM_JAEGER=off skips it (.ci/run's
# first services call: the build happens beside vet, and `make test` starts it).
set -euo pipefail
cd "$(dirname "$0")/.."
mod=scripts/jaeger
cache="${AETHERIUM_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/aetherium}/jaeger"
export PATH=/usr/local/go/bin:$PATH
key=$( { cat "$mod/go.mod" "$mod/go.sum"; go env GOVERSION; } | sha256sum | cut -c1-16)
bin="$cache/$key/jaeger"
query="http://127.0.0.1:${JAEGER_QUERY_PORT:-16686}"

build() {
	mkdir -p "$cache"
	# One build at a time: `start` waits for a build .ci/run began in the background.
	exec 9>"$cache/.lock"
	flock 9
	if [[ -x "$bin" ]]; then
		exec 9>&-
		echo "jaeger: cached ($bin)"
		return 0
	fi
	local start=$SECONDS tmp
	tmp=$(mktemp -d "$cache/build.XXXXXX")
	echo "jaeger: building github.com/jaegertracing/jaeger/cmd/jaeger (cache key $key)"
	if ! (cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$tmp/jaeger" github.com/jaegertracing/jaeger/cmd/jaeger); then
		rm -rf "$tmp"
		exec 9>&-
		echo "jaeger: build FAILED" >&2
		return 1
	fi
	mkdir -p "$(dirname "$bin")"
	mv "$tmp/jaeger" "$bin"
	rm -rf "$tmp"
	exec 9>&- # the lock: released, and not inherited by the Jaeger started next
	echo "jaeger: built in $((SECONDS - start)) s ($bin)"
}

up() { curl -fsS -o /dev/null "$query/api/services" 2>/dev/null; }

case "${1:-start}" in
build) build ;;
path) echo "$bin" ;;
start)
	if up; then
		echo "jaeger: up at $query"
		exit 0
	fi
	build >/dev/null
	log="$cache/jaeger.log"
	setsid "$bin" --config "$PWD/$mod/config.yaml" >"$log" 2>&1 </dev/null &
	for _ in $(seq 1 100); do
		up && break
		sleep 0.1
	done
	up || { echo "jaeger: did not start:" >&2; tail -20 "$log" >&2; exit 1; }
	echo "jaeger: up at $query (OTLP http://127.0.0.1:4318, grpc 127.0.0.1:4317)"
	;;
*)
	echo "usage: $0 build|start|path" >&2
	exit 2
	;;
esac
