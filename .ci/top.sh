#!/usr/bin/env bash
# CI for `tpsmon top`: tmux, the real terminal TestTopInTmux runs top in.
# Under CI (CI=true) that test fails rather than skips without it.
set -euo pipefail
if ! command -v tmux >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux
fi
tmux -V
