#!/usr/bin/env bash
# Installs what the tests need, then runs every test: unit, integration (OpenCL on the local device, PoCL
# when there is no GPU), documentation and browser tests, and the doctests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
cargo test --all-targets --release --no-fail-fast
cargo test --doc --release
