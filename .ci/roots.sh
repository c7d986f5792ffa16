#!/usr/bin/env bash
# Debian roots made by debootstrap, cached outside the clone between CI runs
# on the same machine (TPSMON_CI_CACHE, default /var/cache/tpsmon-ci): a
# root is rebuilt only when its suite or package list changes. Sourced by
# the scripts that need one; `bash .ci/roots.sh` makes them all ahead.
set -euo pipefail

: "${TPSMON_CI_CACHE:=/var/cache/tpsmon-ci}"

# The Debian 11 root: glibc 2.31, dpkg 1.20, systemd 247 (not booted).
BULLSEYE_INCLUDE="systemd,init-system-helpers,ca-certificates"
# The Debian 12 root booted by systemd-nspawn: systemd 252 as PID 1.
BOOKWORM_INCLUDE="systemd,systemd-sysv,dbus,init-system-helpers,curl,ca-certificates,procps,util-linux"

# debootstrap_root SUITE INCLUDE prints the path of a cached root.
debootstrap_root() {
	local suite=$1 include=$2 key dir
	key=$(printf '%s %s' "$suite" "$include" | sha256sum | cut -c1-12)
	dir="$TPSMON_CI_CACHE/$suite-$key"
	if [ ! -x "$dir/usr/bin/dpkg" ]; then
		command -v debootstrap >/dev/null || {
			apt-get update -qq
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
		}
		mkdir -p "$TPSMON_CI_CACHE"
		rm -rf "$dir.tmp"
		echo "roots: debootstrap $suite into $dir (cached for later runs)" >&2
		# The mirror: the one this machine's apt uses, else debootstrap's own.
		local mirror
		mirror=$(sed -n 's/^URIs: *\([^ ]*\/debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
		debootstrap --variant=minbase --include="$include" "$suite" "$dir.tmp" ${mirror:+"$mirror"} >"$TPSMON_CI_CACHE/$suite-$key.log" 2>&1 ||
			{ tail -n 20 "$TPSMON_CI_CACHE/$suite-$key.log" >&2; return 1; }
		mv "$dir.tmp" "$dir"
	fi
	echo "$dir"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	debootstrap_root bullseye "$BULLSEYE_INCLUDE"
	debootstrap_root bookworm "$BOOKWORM_INCLUDE"
fi
