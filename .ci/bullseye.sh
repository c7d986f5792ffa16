#!/usr/bin/env bash
# The .deb on Debian 11 (glibc 2.31, dpkg 1.20), as on the GPU nodes that
# still run it: installed with dpkg in a debootstrap root (cached, see
# roots.sh), then `tpsmon version` and a short `tpsmon demo` run there. The
# root is a copy, so the cached one stays clean. Needs dist/*.deb (make package).
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/roots.sh

fail() { echo "bullseye: $*" >&2; exit 1; }
deb=$(ls dist/tpsmon_*.deb | head -n1)
cached=$(debootstrap_root bullseye "$BULLSEYE_INCLUDE")
work=$(mktemp -d /var/tmp/tpsmon-bullseye.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp -a "$cached" "$work/root"
cp "$deb" "$work/root/var/tmp/tpsmon.deb"

# In the root: its own /proc and /dev, the host's network (the demo's
# simulated servers listen on loopback).
# (nspawn's complaint about its propagation directory on this host is noise.)
in_root() {
	systemd-nspawn -q -D "$work/root" -M tpsmon-bullseye --register=no --keep-unit --console=pipe "$@" \
		2> >(grep -v 'Attempted to remove disk file system' >&2)
}

glibc=$(in_root ldd --version | head -n1)
echo "bullseye: $glibc; $(in_root dpkg --version | head -n1)"
grep -q '2\.31' <<<"$glibc" || fail "the root is not glibc 2.31: $glibc"

in_root dpkg -i /var/tmp/tpsmon.deb || fail "dpkg -i failed on Debian 11"
[ -L "$work/root/etc/systemd/system/multi-user.target.wants/tpsmon.service" ] ||
	fail "installed in a root without a running systemd, tpsmon is not enabled"
v=$(in_root tpsmon version) || fail "tpsmon version failed: $v"
echo "bullseye: $v"
in_root tpsmon --version | grep -qF "$v" || fail "tpsmon --version differs from tpsmon version"
out=$(in_root timeout 60 tpsmon demo --duration 12s 2>&1) || fail "tpsmon demo failed on Debian 11: $out"
rows=$(grep -c 'demo-vllm' <<<"$out" || true)
[ "$rows" -ge 1 ] || fail "tpsmon demo printed no window: $out"
echo "bullseye: tpsmon demo printed $rows windows"
in_root dpkg --purge tpsmon >/dev/null || fail "dpkg --purge failed"
echo "bullseye: ok"
