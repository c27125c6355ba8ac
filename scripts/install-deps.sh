#!/usr/bin/env bash
# Installs what netcl needs on Debian/Ubuntu and is missing: the OpenCL ICD loader, PoCL when no OpenCL
# platform exists (CPU OpenCL), and, with --test, the browser the wiki's end-to-end tests drive and the proxies
# the hosting tests put in front of the wiki (nginx, Caddy, openssl for a test certificate).
# Idempotent: installs nothing when everything is present. Run as root (or with sudo available).
set -euo pipefail

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

pkgs=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

have_pkg ocl-icd-libopencl1 || pkgs+=(ocl-icd-libopencl1)
have_pkg clinfo || pkgs+=(clinfo)
# An OpenCL platform exists when some vendor ICD is registered (a GPU driver, or PoCL).
if ! ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1; then
  pkgs+=(pocl-opencl-icd)
fi
if [ "$want_test" = 1 ]; then
  have_pkg chromium || pkgs+=(chromium)
  have_pkg chromium-driver || pkgs+=(chromium-driver)
  have_pkg nginx || pkgs+=(nginx)
  have_pkg caddy || pkgs+=(caddy)
  have_pkg openssl || pkgs+=(openssl)
fi

if [ "${#pkgs[@]}" -gt 0 ]; then
  echo "netcl: installing ${pkgs[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "netcl: cargo (Rust 1.89 or newer) is required; install it from https://rustup.rs" >&2
  exit 1
fi
