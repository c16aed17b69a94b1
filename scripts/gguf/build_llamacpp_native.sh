#!/usr/bin/env bash
# build_llamacpp_native.sh - llama.cpp's own llama-bench and llama-quantize,
# built for this CPU (-march=native, GGML_NATIVE) from the llama.cpp source
# that the npm package node-llama-cpp ships (llama/gitRelease.bundle; the
# same release as its prebuilt library, scripts/gguf/fetch_ref.sh), into the
# ignored cache .deps/llama-native (once per machine: ~20 minutes on 2
# cores; later runs reuse it). The speed comparisons use this build: the
# npm prebuilt library targets a generic x86-64 and decodes slower.
# Prints the directory holding llama-bench and llama-quantize. Exit 1 when
# the bundle, cmake or a compiler is missing, or the build fails.
set -euo pipefail
SRC=${REFUSION_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
DIR=$SRC/.deps/llama-native
NPM=$(bash "$SRC/scripts/gguf/fetch_ref.sh")
BUNDLE=$NPM/node_modules/node-llama-cpp/llama/gitRelease.bundle
[ -f "$BUNDLE" ] || { echo "build_llamacpp_native.sh: no llama.cpp source bundle at $BUNDLE" >&2; exit 1; }
command -v cmake >/dev/null && command -v g++ >/dev/null ||
  { echo "build_llamacpp_native.sh: cmake and g++ are needed (scripts/install-deps.sh)" >&2; exit 1; }
mkdir -p "$DIR"
exec 9>"$DIR.lock"
flock 9
BIN=$DIR/build/bin
# what a build is for: the source's commit and this CPU (a cache copied to
# another CPU is rebuilt)
stamp() {
  echo "$(git -C "$DIR/src" rev-parse HEAD 2>/dev/null || true) $(grep -m1 'model name' /proc/cpuinfo)" \
    "$(grep -m1 flags /proc/cpuinfo | md5sum | cut -c1-8)"
}
if [ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-quantize" ] && [ "$(cat "$DIR/stamp" 2>/dev/null)" = "$(stamp)" ]; then
  echo "$BIN"
  exit 0
fi
if [ ! -d "$DIR/src/.git" ]; then
  rm -rf "$DIR/src"
  git clone -q "$BUNDLE" "$DIR/src" >&2 2>/dev/null || { echo "build_llamacpp_native.sh: git clone of $BUNDLE failed" >&2; exit 1; }
fi
echo "build_llamacpp_native.sh: building llama-bench and llama-quantize for this CPU in $DIR (~20 minutes on 2 cores)" >&2
cmake -S "$DIR/src" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >"$DIR/cmake.log" 2>&1 ||
  { echo "build_llamacpp_native.sh: cmake failed (see $DIR/cmake.log)" >&2; exit 1; }
cmake --build "$DIR/build" -j "$(nproc)" --target llama-bench llama-quantize >"$DIR/build.log" 2>&1 ||
  { echo "build_llamacpp_native.sh: the build failed (see $DIR/build.log)" >&2; exit 1; }
stamp >"$DIR/stamp"
echo "$BIN"
