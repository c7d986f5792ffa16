#!/usr/bin/env bash
# Installs the built .deb for real (dpkg, as root), checks what it put on the
# system, verifies and scores the unit, upgrades from an older build, then
# purges it. Run by .ci/run after `make package`; it changes the machine, so
# it is not part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

deb=$(ls dist/tpsmon_*.deb | head -n1)
fail() { echo "test-deb: $*" >&2; exit 1; }

echo "== inspecting $deb"
info=$(dpkg-deb -I "$deb")
contents=$(dpkg-deb -c "$deb")
conffiles=$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)
grep -qx /etc/tpsmon/tpsmon.yaml <<<"$conffiles" || fail "conffiles lacks /etc/tpsmon/tpsmon.yaml: $conffiles"
for f in ./usr/bin/tpsmon ./usr/lib/systemd/system/tpsmon.service ./usr/lib/sysusers.d/tpsmon.conf \
	./etc/tpsmon/tpsmon.yaml ./etc/tpsmon/credentials/; do
	grep -q " $f\$" <<<"$contents" || fail "package lacks $f"
done
grep -q '^ Depends: systemd' <<<"$info" || fail "package does not depend on systemd"
for s in postinst prerm postrm; do
	dpkg-deb --ctrl-tarfile "$deb" | tar -t | grep -qx "./$s" || fail "package lacks its $s script"
done
ls dist/tpsmon-*.rpm >/dev/null || fail "no .rpm built"

# Where systemd does not run (CI's container), a stand-in systemctl records
# what the maintainer scripts ask of it.
fake=""
if [ ! -d /run/systemd/system ]; then
	fake=$(mktemp -d)
	mkdir -p /run/systemd/system
	cat >"$fake/systemctl" <<EOS
#!/bin/sh
echo "\$*" >>"$fake/calls"
EOS
	chmod +x "$fake/systemctl"
	export PATH="$fake:$PATH"
	trap 'rmdir /run/systemd/system 2>/dev/null || true; rm -rf "$fake"' EXIT
fi
calls() { [ -z "$fake" ] || { cat "$fake/calls" 2>/dev/null; : >"$fake/calls"; }; }

echo "== installing an older build, then upgrading to $deb"
old=$(mktemp -d)
make --no-print-directory package VERSION=0.0.1 DIST="$old" >/dev/null
dpkg --purge tpsmon >/dev/null 2>&1 || true
dpkg -i "$old"/tpsmon_0.0.1_*.deb >/dev/null
id tpsmon >/dev/null || fail "no tpsmon user after install"
if [ -n "$fake" ]; then
	c=$(calls)
	grep -qx daemon-reload <<<"$c" && grep -qx "enable tpsmon.service" <<<"$c" || fail "fresh install asked systemctl: $c"
fi
echo "# edited by the operator" >>/etc/tpsmon/tpsmon.yaml
dpkg -i --force-confold "$deb"
grep -q "edited by the operator" /etc/tpsmon/tpsmon.yaml || fail "the upgrade overwrote the operator's config"
if [ -n "$fake" ]; then
	c=$(calls)
	grep -qx "try-restart tpsmon.service" <<<"$c" || fail "upgrade did not restart the service: $c"
	! grep -Eq "^(stop|disable)" <<<"$c" || fail "upgrade stopped or disabled the service: $c"
fi
rm -rf "$old"

[ -x /usr/bin/tpsmon ] || fail "/usr/bin/tpsmon missing"
[ -f /usr/lib/systemd/system/tpsmon.service ] || fail "unit missing"
[ "$(stat -c %a /etc/tpsmon/credentials)" = 700 ] || fail "/etc/tpsmon/credentials is not 0700"
[ "$(stat -c %a /etc/tpsmon/credentials/influx-token)" = 600 ] || fail "no 0600 influx-token for LoadCredential="
want=$(basename "$deb" | sed -n 's/^tpsmon_\([^_]*\)_.*/\1/p' | tr '~' '-')
/usr/bin/tpsmon version | grep -qF "tpsmon $want" || fail "tpsmon version does not say $want: $(/usr/bin/tpsmon version)"

echo "== the unit"
systemd-analyze verify /usr/lib/systemd/system/tpsmon.service
score=$(systemd-analyze security --offline=true /usr/lib/systemd/system/tpsmon.service |
	sed -n 's/.*Overall exposure level for tpsmon.service: \([0-9.]*\).*/\1/p')
echo "exposure level: $score"
awk -v s="$score" 'BEGIN { exit !(s != "" && s <= 2.0) }' || fail "exposure $score is above 2.0"

echo "== purging"
dpkg --purge tpsmon
if [ -n "$fake" ]; then
	c=$(calls)
	grep -qx "disable --now tpsmon.service" <<<"$c" || fail "removal did not stop the service: $c"
fi
[ ! -e /usr/bin/tpsmon ] || fail "/usr/bin/tpsmon left after purge"
[ ! -e /etc/tpsmon ] || fail "/etc/tpsmon left after purge: $(find /etc/tpsmon)"
echo "test-deb: ok"
