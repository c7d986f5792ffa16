#!/usr/bin/env bash
# Build a CPU-only llama-server and a tiny random-weights GGUF for the tests
# against a real llama.cpp server, once per machine.
#
# The source is the llama.cpp git bundle that the npm package node-llama-cpp
# ships (llama/gitRelease.bundle); the model is made with the gguf Python
# package of the same source. Both land in a cache outside the clone, keyed by
# the package version, so a second run (or a second clone) costs nothing:
#
#   $TPSMON_CI_CACHE/llama-server-<version>/bin/llama-server
#   $TPSMON_CI_CACHE/llama-server-<version>/tiny.gguf
#
# The binary is built for this machine (GGML_NATIVE) since the cache stays on it.
# Prints the cache directory on its last line. Missing build tools are
# installed with apt-get when running as root.
set -euo pipefail

NLC_VERSION=3.21.1   # node-llama-cpp; its bundle is llama.cpp v0.4.0
cache_root=${TPSMON_CI_CACHE:-/var/cache/tpsmon-ci}
if ! mkdir -p "$cache_root" 2>/dev/null || [ ! -w "$cache_root" ]; then
  cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/tpsmon-ci
  mkdir -p "$cache_root"
fi
dest=$cache_root/llama-server-$NLC_VERSION
here=$(cd "$(dirname "$0")" && pwd)

if [ -x "$dest/bin/llama-server" ] && [ -s "$dest/tiny.gguf" ]; then
  echo "$dest"
  exit 0
fi

# Tools: cmake, a C++ compiler, git, npm, python3 with numpy (Debian's).
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
command -v git >/dev/null || need+=(git)
command -v npm >/dev/null || need+=(npm)
/usr/bin/python3 -c 'import numpy' 2>/dev/null || need+=(python3-numpy)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "llama-server.sh: missing ${need[*]}; install them (not root, so not doing it here)" >&2
    exit 1
  fi
  echo "llama-server.sh: installing ${need[*]}" >&2
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >&2
fi

# One builder at a time on a machine; the loser of the race waits and reuses.
exec 9>"$cache_root/.llama-server.lock"
flock 9
if [ -x "$dest/bin/llama-server" ] && [ -s "$dest/tiny.gguf" ]; then
  echo "$dest"
  exit 0
fi

work=$(mktemp -d "$cache_root/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
echo "llama-server.sh: fetching node-llama-cpp@$NLC_VERSION" >&2
npm pack --silent "node-llama-cpp@$NLC_VERSION" >/dev/null
tar xzf "node-llama-cpp-$NLC_VERSION.tgz" package/llama/gitRelease.bundle
git clone -q package/llama/gitRelease.bundle src 2>/dev/null
rm -rf package "node-llama-cpp-$NLC_VERSION.tgz"

echo "llama-server.sh: building llama-server (CPU, -j2; about 8 minutes on 2 cores)" >&2
start=$(date +%s)
# LLAMA_USE_PREBUILT_UI=OFF: otherwise the build downloads the web UI.
cmake -S src -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_UI=OFF -DBUILD_SHARED_LIBS=OFF >build.log 2>&1 || { tail -40 build.log >&2; exit 1; }
cmake --build build --target llama-server -j2 >>build.log 2>&1 || { tail -60 build.log >&2; exit 1; }
echo "llama-server.sh: built in $(( $(date +%s) - start )) s" >&2

mkdir -p "$work/out/bin"
cp build/bin/llama-server "$work/out/bin/"
PYTHONPATH=src/gguf-py /usr/bin/python3 "$here/tiny-gguf.py" "$work/out/tiny.gguf" src/models/ggml-vocab-llama-spm.gguf >&2
"$work/out/bin/llama-server" --version >"$work/out/version.txt" 2>&1 || true
rm -rf "$dest"
mv "$work/out" "$dest"
echo "$dest"
