# Sourced by build.sh for the toolchain image (sandbox/images/<name>.extra.sh is
# the per-image hook): extra_inputs prints what, beside the package list and
# build.sh, decides the image's content (it goes into the image hash), and
# extra_install "$root" runs after apt-get in the chroot directory.
#
# Go: the host's toolchain, not Debian's golang-go (1.19): the workspace's
# go.mod files are written for a current Go, and the worker's host has one. The
# image hash carries `go version` and GOROOT, so a host upgrade rebuilds it.

go_root() { go env GOROOT 2>/dev/null; }

extra_inputs() {
	command -v go >/dev/null 2>&1 || { echo "toolchain.extra.sh: no go on the host's PATH (the toolchain image copies the host's Go)" >&2; return 1; }
	go version
	go_root
}

extra_install() {
	local root="$1" goroot
	goroot="$(go_root)"
	[[ -x "$goroot/bin/go" ]] || { echo "toolchain.extra.sh: no Go at $goroot" >&2; return 1; }
	mkdir -p "$root/usr/local/bin"
	cp -a "$goroot" "$root/usr/local/go"
	# What building, vetting and testing a module never reads: the spec and API
	# lists, Go's own test suite, the tools' sources (their binaries are in
	# pkg/tool), the standard library's tests and test data, and the pkg/tool
	# binaries of other platforms. About 270 MB become about 150.
	rm -rf "$root/usr/local/go/api" "$root/usr/local/go/doc" "$root/usr/local/go/test" \
		"$root/usr/local/go/misc" "$root/usr/local/go/src/cmd"
	find "$root/usr/local/go/src" -depth -type d -name testdata -exec rm -rf {} +
	find "$root/usr/local/go/src" -type f -name '*_test.go' -delete
	find "$root/usr/local/go/pkg/tool" -mindepth 1 -maxdepth 1 -type d ! -name "$(go env GOOS)_$(go env GOARCH)" -exec rm -rf {} +
	chown -R 0:0 "$root/usr/local/go"
	ln -sf ../go/bin/go "$root/usr/local/bin/go"
	ln -sf ../go/bin/gofmt "$root/usr/local/bin/gofmt"
}
