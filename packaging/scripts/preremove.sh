#!/bin/sh
# deb: $1 = remove | upgrade | deconfigure. rpm: $1 = 0 on erase, 1+ on upgrade.
# On upgrade nothing stops here: the new package restarts the service.
set -e
case "$1" in
remove | 0)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now tpsmon.service || true
	fi
	;;
esac
exit 0
