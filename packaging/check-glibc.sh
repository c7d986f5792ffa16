#!/usr/bin/env bash
# Fails when BINARY needs a glibc symbol newer than FLOOR (default 2.28), so a
# release never stops with "version `GLIBC_2.xx' not found" on RHEL 8,
# Ubuntu 20.04 or Debian 11. Also insists on a PIE without BIND_NOW: go-nvml's
# functions are bound lazily, when the driver's library has been loaded.
set -euo pipefail
bin=${1:?usage: check-glibc.sh BINARY [FLOOR]}
floor=${2:-2.28}
newest=$(objdump -T "$bin" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/^GLIBC_//' | sort -uV | tail -n1)
[ -n "$newest" ] || { echo "check-glibc: no GLIBC symbols in $bin (not a dynamic glibc binary?)" >&2; exit 1; }
if [ "$(printf '%s\n%s\n' "$floor" "$newest" | sort -V | tail -n1)" != "$floor" ]; then
	echo "check-glibc: $bin needs GLIBC_$newest, newer than the floor $floor:" >&2
	objdump -T "$bin" | grep -F "GLIBC_$newest" >&2
	exit 1
fi
readelf -d "$bin" | grep -q 'Flags:.*PIE' || { echo "check-glibc: $bin is not a PIE" >&2; exit 1; }
! readelf -d "$bin" | grep -Eq 'BIND_NOW|Flags: .*NOW' || { echo "check-glibc: $bin binds NVML symbols at load (BIND_NOW)" >&2; exit 1; }
! readelf -d "$bin" | grep -q 'NEEDED.*libnvidia-ml' || { echo "check-glibc: $bin needs libnvidia-ml at load" >&2; exit 1; }
echo "check-glibc: $bin newest symbol GLIBC_$newest (floor $floor), PIE, lazy NVML"
