#!/usr/bin/env bash
# Generates what the packages ship besides the binary, from the binary
# itself so it matches its flags: man pages (gzip -9n), bash/zsh/fish
# completions and the Debian changelog for VERSION.
# usage: gen-docs.sh BINARY VERSION OUTDIR
set -euo pipefail
bin=${1:?binary} version=${2:?version} out=${3:?outdir}
rm -rf "$out"
mkdir -p "$out/man" "$out/completions"
"$bin" man "$out/man"
gzip -9n "$out"/man/*.1
"$bin" completion bash >"$out/completions/tpsmon.bash"
"$bin" completion zsh >"$out/completions/_tpsmon"
"$bin" completion fish >"$out/completions/tpsmon.fish"
# A native package's changelog: one entry for the version being built,
# dated by the commit it was built from (reproducible).
when=$(git log -1 --format=%cD 2>/dev/null || date -R)
{
	echo "tpsmon (${version/-/\~}) unstable; urgency=medium"
	echo
	echo "  * Release $version."
	echo
	echo " -- tpsmon maintainers <tpsmon@users.noreply.github.com>  $when"
} | gzip -9n >"$out/changelog.gz"
