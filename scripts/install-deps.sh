#!/usr/bin/env bash
# Install everything refusion needs on Debian 12 (run as root or with sudo).
set -euo pipefail
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
need=(build-essential cmake pkg-config libjansson-dev libpcre2-dev libutf8proc-dev
      libmicrohttpd-dev libopenblas-dev gnuplot-nox nodejs npm curl)
missing=()
for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
