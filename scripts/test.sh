#!/usr/bin/env bash
# Installs what the tests need, then runs every test: unit, integration (OpenCL on the local device, PoCL
# when there is no GPU), documentation and browser tests, and the doctests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
# The engine alone, without the wiki and the scripting front-end (the layering's promise).
cargo build --release --lib --no-default-features
cargo test --all-targets --release --no-fail-fast
cargo test --doc --release
