#!/usr/bin/env bash
# fetch_ref.sh - install the independent GGUF readers the tests compare
# against into the ignored cache .deps/npm-gguf (once; later runs reuse it):
#   @huggingface/gguf  - a GGUF parser (metadata and tensor infos)
#   node-llama-cpp     - llama.cpp itself, as prebuilt binaries; only the
#                        plain linux-x64 CPU build (--omit=optional drops the
#                        CUDA / Vulkan / ARM builds: 91 MB instead of 730 MB)
# Prints the npm prefix. Exit 1 when npm / the registry is not available.
set -euo pipefail
SRC=${REFUSION_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
PREFIX=$SRC/.deps/npm-gguf
# tests that share this cache run at once: one installs while the others wait
mkdir -p "$(dirname "$PREFIX")"
exec 9>"$PREFIX.lock"
flock 9
LLAMA=3.22.1
GGUF=0.4.6
have() { # package name, version
  local pj=$PREFIX/node_modules/$1/package.json
  [ -f "$pj" ] && node -e "process.exit(require('$pj').version === '$2' ? 0 : 1)"
}
command -v node >/dev/null || { echo "fetch_ref.sh: node is not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }
if ! have node-llama-cpp $LLAMA || ! have @node-llama-cpp/linux-x64 $LLAMA || ! have @huggingface/gguf $GGUF; then
  command -v npm >/dev/null || { echo "fetch_ref.sh: npm is not installed" >&2; exit 1; }
  mkdir -p "$PREFIX"
  if ! npm install --prefix "$PREFIX" --no-audit --no-fund --loglevel=error --omit=optional \
       node-llama-cpp@$LLAMA @node-llama-cpp/linux-x64@$LLAMA @huggingface/gguf@$GGUF >&2; then
    echo "fetch_ref.sh: npm install node-llama-cpp@$LLAMA @huggingface/gguf@$GGUF failed (is the npm registry reachable?)" >&2
    exit 1
  fi
fi
[ -f "$PREFIX/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node" ] || \
  [ -n "$(ls "$PREFIX"/node_modules/@node-llama-cpp/linux-x64/bins/*/llama-addon.node 2>/dev/null)" ] || {
  echo "fetch_ref.sh: the prebuilt llama.cpp binary (@node-llama-cpp/linux-x64) is missing" >&2; exit 1; }
echo "$PREFIX"
