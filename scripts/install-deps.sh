#!/usr/bin/env bash
# Install everything refusion needs on Debian 12 (run as root or with sudo).
# Node.js + npm are only needed by the tests that compare the tokenizer with
# the JavaScript reference; an existing node/npm (e.g. from NodeSource, which
# bundles npm and conflicts with Debian's npm package) is kept.
set -euo pipefail
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
need=(build-essential cmake pkg-config libjansson-dev libpcre2-dev libutf8proc-dev
      libmicrohttpd-dev libopenblas-dev gnuplot-nox curl
      clang libclang-rt-14-dev libomp-14-dev # clang + libFuzzer + OpenMP for scripts/fuzz.sh
      openmpi-bin libopenmpi-dev # data-parallel training (mpirun -np N refusion train) and its test
      python3-jinja2 # the reference the chat-template tests compare with (tests/tokenizer_jinja.sh)
      python3-jsonschema # the validator the JSON-schema grammar tests compare with (tests/grammar_json_schema.sh)
      nginx-light # the load balancer of the scale-out test (tests/serve_nginx.sh)
      chromium) # the browser that drives the web page in its test (tests/serve_webui.sh)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
missing=()
for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
