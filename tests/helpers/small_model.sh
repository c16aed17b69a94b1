# small_model.sh - sourced by shell tests: rf_small_model DIR [init options...]
# writes DIR/tok (a 400-token BPE trained on a small arithmetic corpus) and
# DIR/m (a random tiny model with that tokenizer, `refusion init`), using
# $BIN. Returns non-zero, with the tool's output on stderr, when a step fails.
rf_small_model() {
  local dir=$1
  shift
  mkdir -p "$dir" || return 1
  local i
  for i in $(seq 1 200); do
    echo "What is $i plus $((i * 7 % 13))? The answer is $((i + i * 7 % 13))."
  done >"$dir/corpus.txt"
  "$BIN" tokenizer-train --input "$dir/corpus.txt" --vocab 400 -o "$dir/tok" >"$dir/log" 2>&1 &&
    "$BIN" init -o "$dir/m" --preset tiny --seed 3 --std 0.5 --tokenizer "$dir/tok/tokenizer.json" "$@" \
      >>"$dir/log" 2>&1 || { cat "$dir/log" >&2; return 1; }
}
