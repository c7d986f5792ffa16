#!/bin/sh
# deb: $1 = configure, $2 = the version upgraded from (empty on install).
# rpm: $1 = 1 on install, 2 or more on upgrade.
set -e

if command -v systemd-sysusers >/dev/null 2>&1; then
	systemd-sysusers /usr/lib/sysusers.d/tpsmon.conf
elif ! getent passwd tpsmon >/dev/null; then
	useradd --system --home-dir /var/lib/tpsmon --no-create-home --shell /usr/sbin/nologin tpsmon
fi

# LoadCredential= fails the unit when its file is missing: start with an
# empty token (no authentication, as InfluxDB 1.8 without auth wants).
if [ ! -e /etc/tpsmon/credentials/influx-token ]; then
	install -m 0600 /dev/null /etc/tpsmon/credentials/influx-token
fi

upgrade=no
case "$1" in
configure) [ -n "$2" ] && upgrade=yes ;;
[0-9]*) [ "$1" -ge 2 ] && upgrade=yes ;;
esac

# Only where systemd runs (not in a chroot or an image build).
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	if [ "$upgrade" = yes ]; then
		# The new binary takes over; the old package's scripts never stop it.
		systemctl try-restart tpsmon.service || true
	else
		# Enabled, not started: configure /etc/tpsmon/tpsmon.yaml first.
		systemctl enable tpsmon.service || true
	fi
fi
exit 0
