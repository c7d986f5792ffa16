#!/bin/sh
# deb: $1 = remove | purge | upgrade | …  rpm: $1 = 0 on erase, 1+ on upgrade.
set -e
case "$1" in
purge)
	# Spool, positions and quarantine go with a purge, like the config.
	rm -rf /var/lib/tpsmon
	rm -f /etc/tpsmon/credentials/influx-token
	rmdir /etc/tpsmon/credentials /etc/tpsmon 2>/dev/null || true
	;;
esac
case "$1" in
remove | purge | 0)
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	;;
esac
exit 0
