#!/usr/bin/env bash
# Configure and build refusion into ./build (Release, AVX2/FMA, OpenMP).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
