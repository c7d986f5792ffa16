#!/usr/bin/env bash
# Verifies tpsmon's NVML adapter on a machine with an NVIDIA GPU: prints
# each GPU's readings, the cost of one sample per GPU, whether the driver's
# utilization sample buffer and GPM are there, and the compute processes.
# Needs Go and gcc (cgo).
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_CFLAGS=-Wno-deprecated-declarations
nvidia-smi -L 2>/dev/null || echo "(nvidia-smi not found; NVML may still load)"
go test -count=1 -tags gpu -run TestRealNVML -v ./nvml
