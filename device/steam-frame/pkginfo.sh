#!/usr/bin/env bash
# pkginfo.sh <package> — installed=, version_name=, version_code=, saves= lines.
source "$(dirname "$0")/lib.sh"
[[ $# -eq 1 ]] || die "usage: pkginfo.sh <package>"
check_package "$1"
pkginfo "$1"
