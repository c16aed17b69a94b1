#!/usr/bin/env bash
# fetch_quantize.sh - llama.cpp's own quantizer as a command for the tests:
# scripts/gguf/llama_quantize.c compiled against the headers of the
# llama.cpp source that npm node-llama-cpp ships (llama/gitRelease.bundle,
# the release its prebuilt libllama was built from) and linked to that
# prebuilt libllama. Nothing of llama.cpp is compiled: the headers only
# give the C declarations. Cached in the ignored .deps/llama-quantize
# (the headers in .deps/llama-src); prints the command's path.
# Exit 1 when node-llama-cpp cannot be installed (fetch_ref.sh) or no C
# compiler / git is there.
set -euo pipefail
SRC=${REFUSION_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
NPM=$(bash "$SRC/scripts/gguf/fetch_ref.sh")
BINS=$(dirname "$(ls "$NPM"/node_modules/@node-llama-cpp/linux-x64/bins/*/libllama.*so | head -1)")
OUT=$SRC/.deps/llama-quantize
TOOL=$OUT/llama_quantize
exec 8>"$OUT.lock" # one compile at a time
flock 8
if [ ! -x "$TOOL" ] || [ "$SRC/scripts/gguf/llama_quantize.c" -nt "$TOOL" ]; then
  HDR=$SRC/.deps/llama-src
  if [ ! -f "$HDR/include/llama.h" ]; then
    rm -rf "$HDR"
    git clone -q "$NPM/node_modules/node-llama-cpp/llama/gitRelease.bundle" "$HDR" >&2 2>/dev/null || {
      echo "fetch_quantize.sh: cannot unpack node-llama-cpp's llama/gitRelease.bundle" >&2; exit 1; }
  fi
  mkdir -p "$OUT"
  ${CC:-cc} -O1 -I"$HDR/include" -I"$HDR/ggml/include" "$SRC/scripts/gguf/llama_quantize.c" -o "$TOOL.tmp" \
    "$BINS"/libllama.*so "$BINS"/libggml.*so "$BINS"/libggml-base.so -Wl,-rpath,"$BINS" >&2 || {
    echo "fetch_quantize.sh: compiling llama_quantize.c against node-llama-cpp's libllama failed" >&2; exit 1; }
  mv "$TOOL.tmp" "$TOOL"
fi
echo "$TOOL"
