#!/usr/bin/env bash
# The .deb under a real systemd, used as a person would: systemd 252 boots
# as PID 1 in a Debian 12 root (debootstrap, cached: see roots.sh) with
# systemd-nspawn, driven through nsenter. It installs the package, starts
# it with the shipped configuration, points it at an InfluxDB that needs a
# password through the documented token path, runs `tpsmon check` as root
# before and after a start, reads one server from another unit's journal
# and one from a file owned by another user, reloads, stalls the watchdog,
# upgrades and purges, and asserts the points that arrive and what
# systemctl, the journal, /healthz and check say. Needs dist/*.deb.
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/roots.sh

deb=$(ls dist/tpsmon_*.deb | head -n1)
cached=$(debootstrap_root bookworm "$BOOKWORM_INCLUDE")
work=$(mktemp -d /var/tmp/tpsmon-systemd.XXXXXX)
root=$work/root
nspawn="" init="" influx_pid=""

cleanup() {
	[ -z "$init" ] || nsenter -t "$init" -a systemctl poweroff >/dev/null 2>&1 || true
	if [ -n "$nspawn" ]; then
		for _ in $(seq 1 30); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.5; done
		kill "$nspawn" 2>/dev/null || true
		wait "$nspawn" 2>/dev/null || true
	fi
	[ -z "$influx_pid" ] || { kill "$influx_pid" 2>/dev/null || true; wait "$influx_pid" 2>/dev/null || true; }
	rm -rf "$work"
}
trap cleanup EXIT

c() { nsenter -t "$init" -a "$@"; }
fail() {
	echo "systemd: FAIL: $*" >&2
	if [ -n "$init" ]; then
		c systemctl status tpsmon --no-pager -l >&2 || true
		c journalctl -u tpsmon -n 40 --no-pager >&2 || true
	fi
	exit 1
}
say() { echo "systemd: $*"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND each second.
wait_for() {
	local n=$1 what=$2
	shift 2
	for _ in $(seq 1 "$n"); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 1
	done
	fail "waited ${n}s for $what"
}
status_line() { c systemctl show -p StatusText --value tpsmon; }
main_pid() { c systemctl show -p MainPID --value tpsmon; }

cp -a "$cached" "$root"
cp "$deb" "$root/var/tmp/tpsmon.deb"

say "booting systemd in $root"
systemd-nspawn -q -D "$root" -M tpsmon-systemd -b --register=no --keep-unit --console=passive \
	>"$work/console.log" 2>&1 &
nspawn=$!
for _ in $(seq 1 60); do
	# ps exits 1 while nspawn has no child yet: not an error under pipefail.
	init=$(ps -o pid= --ppid "$nspawn" | sed -n 1p | tr -d ' ' || true)
	[ -n "$init" ] && c systemctl is-system-running --wait 2>/dev/null | grep -Eq 'running|degraded' && break
	init=""
	sleep 1
done
[ -n "$init" ] || { cat "$work/console.log" >&2; fail "systemd did not boot"; }
say "$(c systemctl --version | sed -n 1p) is PID 1 (host pid $init)"

# InfluxDB 1.8 with authentication, on the loopback the container shares.
iport=$(free_port)
hport=$(free_port)
mkdir -p "$work/influx"
INFLUXDB_REPORTING_DISABLED=true INFLUXDB_BIND_ADDRESS=127.0.0.1:$(free_port) \
	INFLUXDB_HTTP_BIND_ADDRESS=127.0.0.1:$iport INFLUXDB_HTTP_AUTH_ENABLED=true INFLUXDB_HTTP_LOG_ENABLED=false \
	INFLUXDB_META_DIR=$work/influx/meta INFLUXDB_DATA_DIR=$work/influx/data INFLUXDB_DATA_WAL_DIR=$work/influx/wal \
	INFLUXDB_LOGGING_LEVEL=warn "$(go env GOPATH)/bin/influxd" run >"$work/influx/log" 2>&1 &
influx_pid=$!
wait_for 30 "influxd" curl -fsS -o /dev/null "http://127.0.0.1:$iport/ping"
curl -fsS -XPOST "http://127.0.0.1:$iport/query" --data-urlencode "q=CREATE USER admin WITH PASSWORD 's3cret' WITH ALL PRIVILEGES" >/dev/null
curl -fsS -XPOST -u admin:s3cret "http://127.0.0.1:$iport/query" --data-urlencode "q=CREATE DATABASE tpsmon" >/dev/null
# tokens SERVER: the output tokens InfluxDB holds for SERVER.
tokens() {
	curl -fsS -G -u admin:s3cret "http://127.0.0.1:$iport/query" --data-urlencode db=tpsmon \
		--data-urlencode "q=SELECT sum(tokens) FROM tpsmon_server WHERE server='$1'" |
		python3 -c 'import json,sys; r=json.load(sys.stdin)["results"][0]; print(int(r["series"][0]["values"][0][1]) if "series" in r else 0)'
}
has_tokens() { [ "$(tokens "$1")" -gt 0 ]; }

say "== install"
c dpkg -i /var/tmp/tpsmon.deb >/dev/null
[ "$(c systemctl is-enabled tpsmon)" = enabled ] || fail "not enabled after install"
! c systemctl is-active -q tpsmon || fail "a fresh install started the service before it was configured"

say "== start with the shipped configuration"
c systemctl start tpsmon
wait_for 20 "tpsmon active" c systemctl is-active -q tpsmon
wait_for 20 "the status line" sh -c "nsenter -t $init -a systemctl show -p StatusText --value tpsmon | grep -q 'monitoring 0 servers'"
say "status: $(status_line)"
sleep 12 # a window closes
j=$(c journalctl -u tpsmon --no-pager -o cat)
grep -q 'sink.file.path is none' <<<"$j" || fail "the shipped default did not say where points go: $j"
! grep -q '^tpsmon_' <<<"$j" || fail "the shipped default writes points into the journal"
c systemctl stop tpsmon

say "== two inference servers: one logs to its unit's journal, one to a file of another user"
c useradd --system --no-create-home llm
c install -d -o llm -g adm -m 0750 /var/log/llm
c install -d -o llm -g llm -m 0700 /var/log/llm-private
line='INFO $(date +%%m-%%d\\ %%H:%%M:%%S) [loggers.py:271] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 120.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 12.0%%'
cat >"$root/etc/systemd/system/journal-llm.service" <<EOF
[Service]
DynamicUser=yes
ExecStart=/bin/sh -c 'while :; do echo "$line"; sleep 1; done'
EOF
cat >"$root/etc/systemd/system/file-llm.service" <<EOF
[Service]
User=llm
Group=adm
UMask=0027
ExecStart=/bin/sh -c 'while :; do echo "$line" >>/var/log/llm/vllm.log; echo "$line" >>/var/log/llm-private/vllm.log; sleep 1; done'
EOF
c systemctl daemon-reload
c systemctl start journal-llm file-llm
wait_for 10 "the file log" c test -s /var/log/llm/vllm.log
say "file log: $(c stat -c '%U:%G %a' /var/log/llm/vllm.log)"

say "== configured as the README says: InfluxDB URL in the config, the password in the credential file"
http="127.0.0.1:$hport"
cat >"$root/etc/tpsmon/tpsmon.yaml" <<EOF
gpu: {backend: nvml}
servers:
  - {name: from-journal, engine: vllm, log: {journal_unit: journal-llm.service}}
  - {name: from-file, engine: vllm, log: {file: /var/log/llm/vllm.log}}
  - {name: private, engine: vllm, log: {file: /var/log/llm-private/vllm.log}}
discovery: {enabled: false}
sink:
  influx: {url: "http://127.0.0.1:$iport", bucket: tpsmon/autogen}
http: {listen: "$http"}
EOF
printf 'admin:s3cret\n' | c install -m 0600 /dev/stdin /etc/tpsmon/credentials/influx-token

say "== check as root before the first start"
c rm -rf /var/lib/tpsmon
out=$(c tpsmon check 2>&1) && fail "check passed with an unreadable log and no GPU: $out"
echo "$out"
for want in "probing as the service does, as user tpsmon" \
	"ok    influx token: the influx-token credential" \
	"reachable, token and bucket \"tpsmon/autogen\" accepted" \
	"ok    server from-journal: journal of journal-llm.service readable" \
	"ok    server from-file: log /var/log/llm/vllm.log readable" \
	"FAIL  server private: log unreadable: open /var/log/llm-private/vllm.log: permission denied" \
	"systemd creates /var/lib/tpsmon"; do
	grep -qF "$want" <<<"$out" || fail "check did not say: $want"
done
! c test -e /var/lib/tpsmon || fail "check as root left /var/lib/tpsmon behind: $(c ls -la /var/lib/tpsmon)"

say "== start after check"
c systemctl start tpsmon
wait_for 10 "tpsmon active" c systemctl is-active -q tpsmon
wait_for 40 "tokens from the journal source in InfluxDB" has_tokens from-journal
wait_for 20 "tokens from the file source in InfluxDB" has_tokens from-file
say "InfluxDB: from-journal $(tokens from-journal) tokens, from-file $(tokens from-file) tokens"
s=$(status_line)
say "status: $s"
grep -q '(1 unreadable)' <<<"$s" && grep -q 'private: log /var/log/llm-private/vllm.log' <<<"$s" ||
	fail "the status line does not say which log is unreadable and why: $s"
hz=$(curl -sS "http://$http/readyz")
grep -q 'log unreadable, server reads as down: private: .*permission denied' <<<"$hz" || fail "/readyz does not show the unreadable log: $hz"
# Read whole first: grep -q leaving the pipe early fails journalctl (SIGPIPE) under pipefail.
journal=$(c journalctl -u tpsmon --no-pager -o cat)
grep -q 'log unreadable; the server reads as down.*private' <<<"$journal" ||
	fail "the journal does not say which log is unreadable"

score=$(c systemd-analyze security tpsmon.service --no-pager | sed -n 's/.*Overall exposure level for tpsmon.service: \([0-9.]*\).*/\1/p')
say "live systemd-analyze security: $score"
awk -v s="$score" 'BEGIN { exit !(s != "" && s <= 2.0) }' || fail "exposure $score is above 2.0"

say "== check as root while the service runs, then a restart"
out=$(c tpsmon check 2>&1) || true
grep -qF "ok    spool /var/lib/tpsmon/spool writable" <<<"$out" || fail "check with the service running: $out"
[ -z "$(c find /var/lib/tpsmon ! -user tpsmon)" ] || fail "check left files the service cannot use: $(c find /var/lib/tpsmon ! -user tpsmon)"
pid=$(main_pid)
c systemctl restart tpsmon
wait_for 10 "tpsmon active after check and restart" c systemctl is-active -q tpsmon
[ "$(main_pid)" != "$pid" ] || fail "no restart"

say "== reload: a server renamed, one dropped"
before=$(tokens from-journal)
sed -i 's/name: from-journal,/name: renamed,/; /name: private,/d' "$root/etc/tpsmon/tpsmon.yaml"
c systemctl reload tpsmon
wait_for 30 "the status line after reload" sh -c "nsenter -t $init -a systemctl show -p StatusText --value tpsmon | grep -q '^monitoring 2 servers' && ! nsenter -t $init -a systemctl show -p StatusText --value tpsmon | grep -q unreadable"
wait_for 40 "tokens under the new name" has_tokens renamed
say "after reload: status '$(status_line)', renamed $(tokens renamed) tokens (from-journal had $before)"

say "== watchdog: the daemon stalls"
mkdir -p "$root/etc/systemd/system/tpsmon.service.d"
printf '[Service]\nWatchdogSec=4s\nTimeoutStopSec=4s\n' >"$root/etc/systemd/system/tpsmon.service.d/ci.conf"
c systemctl daemon-reload
c systemctl restart tpsmon
wait_for 10 "tpsmon active" c systemctl is-active -q tpsmon
restarts=$(c systemctl show -p NRestarts --value tpsmon)
pid=$(main_pid)
c kill -STOP "$pid"
wait_for 40 "a restart by the watchdog" sh -c "[ \"\$(nsenter -t $init -a systemctl show -p NRestarts --value tpsmon)\" -gt $restarts ]"
wait_for 20 "tpsmon active after the watchdog" c systemctl is-active -q tpsmon
j=$(c journalctl -u tpsmon --no-pager -o cat)
grep -q 'Watchdog timeout' <<<"$j" || fail "the journal does not show the watchdog timeout"
n=$(grep -c '^goroutine ' <<<"$j" || true)
[ "$n" -eq 0 ] || fail "the watchdog left $n goroutine dumps in the journal"
say "watchdog restarted it (pid $pid -> $(main_pid)), no goroutine dump"
rm -rf "$root/etc/systemd/system/tpsmon.service.d"
c systemctl daemon-reload

say "== upgrade"
ver=$(dpkg-deb -f "$deb" Version)
mkdir -p "$work/up"
dpkg-deb -R "$deb" "$work/up/pkg"
sed -i "s/^Version: .*/Version: ${ver}+ci1/" "$work/up/pkg/DEBIAN/control"
dpkg-deb -Zxz -b "$work/up/pkg" "$root/var/tmp/tpsmon-up.deb" >/dev/null
pid=$(main_pid)
c dpkg -i /var/tmp/tpsmon-up.deb >/dev/null
[ "$(c dpkg-query -W -f '${Version}' tpsmon)" = "${ver}+ci1" ] || fail "upgrade did not install ${ver}+ci1"
wait_for 10 "tpsmon active after upgrade" c systemctl is-active -q tpsmon
[ "$(main_pid)" != "$pid" ] || fail "the upgrade did not restart the running service"
grep -q 'name: renamed' "$root/etc/tpsmon/tpsmon.yaml" || fail "the upgrade replaced the configuration"
[ "$(c systemctl is-enabled tpsmon)" = enabled ] || fail "not enabled after upgrade"

say "== purge"
c dpkg --purge tpsmon >/dev/null
! c systemctl is-active -q tpsmon || fail "still running after purge"
for p in /usr/bin/tpsmon /lib/systemd/system/tpsmon.service /etc/tpsmon /var/lib/tpsmon \
	/etc/systemd/system/multi-user.target.wants/tpsmon.service; do
	! c test -e "$p" || fail "$p left after purge"
done
say "ok"
