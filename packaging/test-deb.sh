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
for f in ./usr/bin/tpsmon ./lib/systemd/system/tpsmon.service ./usr/lib/sysusers.d/tpsmon.conf \
	./etc/tpsmon/tpsmon.yaml ./etc/tpsmon/credentials/ ./usr/share/doc/tpsmon/copyright \
	./usr/share/doc/tpsmon/changelog.gz ./usr/share/man/man1/tpsmon.1.gz ./usr/share/man/man1/tpsmon-run.1.gz \
	./usr/share/bash-completion/completions/tpsmon ./usr/share/zsh/vendor-completions/_tpsmon \
	./usr/share/fish/vendor_completions.d/tpsmon.fish; do
	grep -q " $f\$" <<<"$contents" || fail "package lacks $f"
done
grep -q '^ Depends:.*libc6 (>= 2.28)' <<<"$info" || fail "package does not depend on libc6 (>= 2.28): $(grep Depends <<<"$info")"
grep -q '^ Depends:.*systemd' <<<"$info" || fail "package does not depend on systemd"
# dpkg 1.19/1.20 (Ubuntu 20.04, Debian 11) cannot unpack zstd members.
members=$(ar t "$deb")
grep -qx 'data.tar.xz' <<<"$members" || fail "data member is not xz (dpkg < 1.21 cannot read zstd): $members"
# The list is read whole first: grep -q leaving a pipe early makes tar fail
# on SIGPIPE, which pipefail reported as a missing script.
control=$(dpkg-deb --ctrl-tarfile "$deb" | tar -t)
for s in postinst prerm postrm; do
	grep -qx "./$s" <<<"$control" || fail "package lacks its $s script"
done
rpm=$(ls dist/tpsmon-*.rpm) || fail "no .rpm built"
name=$(basename "$deb")
grep -qF "dist/${name%%_*}_<version>_<arch>.deb" README.md || grep -qF "tpsmon_<version>_amd64.deb" README.md ||
	fail "README does not name the .deb as make package does ($name)"
grep -qF "tpsmon-<version>-1.x86_64.rpm" README.md || fail "README does not name the .rpm as make package does ($(basename "$rpm"))"

echo "== the packaged binary: glibc floor"
x=$(mktemp -d)
dpkg-deb -x "$deb" "$x"
bash packaging/check-glibc.sh "$x/usr/bin/tpsmon" 2.28
rm -rf "$x"

echo "== lintian (fails on any error; warnings are fixed or overridden with a reason)"
command -v lintian >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lintian >/dev/null; }
lintian --fail-on error,warning --display-info "$deb" 2>&1 | grep -v 'running with root privileges' || true
lintian --fail-on error,warning "$deb" >/dev/null 2>&1 || fail "lintian reports errors or warnings"

echo "== fresh install where systemd does not run (a chroot, an image build): enabled all the same"
old=$(mktemp -d)
make --no-print-directory package VERSION=0.0.1 DIST="$old" >/dev/null
dpkg --purge tpsmon >/dev/null 2>&1 || true
wants=/etc/systemd/system/multi-user.target.wants/tpsmon.service
if [ ! -d /run/systemd/system ]; then
	dpkg -i "$old"/tpsmon_0.0.1_*.deb >/dev/null
	[ -L "$wants" ] || fail "fresh install without a running systemd left tpsmon disabled (no $wants)"
else
	dpkg -i "$old"/tpsmon_0.0.1_*.deb >/dev/null
	systemctl is-enabled tpsmon.service >/dev/null || fail "fresh install left tpsmon disabled"
fi
id tpsmon >/dev/null || fail "no tpsmon user after install"
for g in systemd-journal adm; do
	id -nG tpsmon | tr ' ' '\n' | grep -qx "$g" || fail "tpsmon is not in group $g: $(id tpsmon)"
done

# Where systemd does not run (CI's container), a stand-in systemctl records
# what the maintainer scripts (through deb-systemd-invoke) ask of it.
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

echo "== upgrading to $deb"
echo "# edited by the operator" >>/etc/tpsmon/tpsmon.yaml
dpkg -i --force-confold "$deb" 2>&1 | tee "$old/upgrade.log"
grep -q "edited by the operator" /etc/tpsmon/tpsmon.yaml || fail "the upgrade overwrote the operator's config"
if [ -n "$fake" ]; then
	c=$(calls)
	# deb-systemd-invoke asks policy-rc.d first (containers often forbid
	# starting services there): either it restarted, or policy said no.
	grep -q "try-restart tpsmon.service" <<<"$c" || grep -q "not running 'try-restart tpsmon.service'" "$old/upgrade.log" ||
		fail "upgrade did not restart the service: $c"
	! grep -Eq "(^| )(stop|disable) " <<<"$c" || fail "upgrade stopped or disabled the service: $c"
fi
[ -x /usr/bin/tpsmon ] || fail "/usr/bin/tpsmon missing"
[ -f /lib/systemd/system/tpsmon.service ] || fail "unit missing"
[ "$(stat -c %a /etc/tpsmon/credentials)" = 700 ] || fail "/etc/tpsmon/credentials is not 0700"
[ "$(stat -c %a /etc/tpsmon/credentials/influx-token)" = 600 ] || fail "no 0600 influx-token for LoadCredential="
want=$(basename "$deb" | sed -n 's/^tpsmon_\([^_]*\)_.*/\1/p' | tr '~' '-')
/usr/bin/tpsmon version | grep -qF "tpsmon $want" || fail "tpsmon version does not say $want: $(/usr/bin/tpsmon version)"

echo "== the unit"
systemd-analyze verify /lib/systemd/system/tpsmon.service
score=$(systemd-analyze security --offline=true /lib/systemd/system/tpsmon.service |
	sed -n 's/.*Overall exposure level for tpsmon.service: \([0-9.]*\).*/\1/p')
echo "exposure level: $score"
awk -v s="$score" 'BEGIN { exit !(s != "" && s <= 2.0) }' || fail "exposure $score is above 2.0"

echo "== purging"
dpkg --purge tpsmon 2>&1 | tee "$old/purge.log"
if [ -n "$fake" ]; then
	c=$(calls)
	grep -q "stop tpsmon.service" <<<"$c" || grep -q "not running 'stop tpsmon.service'" "$old/purge.log" ||
		fail "removal did not stop the service: $c"
fi
[ ! -e "$wants" ] || fail "$wants left after purge"
[ ! -e /usr/bin/tpsmon ] || fail "/usr/bin/tpsmon left after purge"
[ ! -e /etc/tpsmon ] || fail "/etc/tpsmon left after purge: $(find /etc/tpsmon)"
rm -rf "$old"
echo "test-deb: ok"
