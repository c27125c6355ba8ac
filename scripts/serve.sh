#!/usr/bin/env bash
# Installs what is missing (OpenCL loader, PoCL when no OpenCL platform exists), builds netcl, and starts the
# wiki on the local OpenCL device. Extra arguments go to `netcl serve` (e.g. --addr 0.0.0.0:8080).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo build --release --bin netcl
exec target/release/netcl serve "$@"
