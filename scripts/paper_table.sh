#!/usr/bin/env bash
# paper_table.sh - the paper's table in miniature, in one command:
#   1. the task suite (seeded train/test split)        -> data/
#   2. a small BPE tokenizer trained on the train split -> $OUT/tokenizer
#   3. three models of the same shape and budget. As in the paper (ReFusion
#      is fine-tuned from Qwen3, Dream from Qwen2.5), one AR base model is
#      trained first, then fine-tuned three ways for the same number of steps:
#      more AR, the ReFusion objective, the MDM objective
#                                                       -> $OUT/{base,refusion,ar,mdm}
#   4. each evaluated with its decoder on the test set  -> $OUT/results/*.{md,json}
#   5. the table (Markdown + JSON) and a speed-vs-accuracy plot
#                                                       -> $OUT/table.md, table.json, speed_accuracy.svg
# Every knob is an environment variable (defaults below). Steps whose output
# exists are kept unless FORCE=1; STAGES="table" redoes only the table.
#   scripts/paper_table.sh                 # everything
#   STAGES="eval table" scripts/paper_table.sh
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${REFUSION_BIN:-build/refusion}
OUT=${OUT:-runs/paper}
DATA=${DATA:-data}
SEED=${SEED:-1}
N_TRAIN=${N_TRAIN:-6000}
N_TEST=${N_TEST:-300}
VOCAB=${VOCAB:-1024}
# model shape and training budget: the same for all three models
CONFIG=${CONFIG:-small}
BASE_ARGS=${BASE_ARGS:-"--epochs 2 --batch 16 --seq-len 256 --lr 2e-3 --warmup 30 --min-lr 1e-4"}
FT_ARGS=${FT_ARGS:-"--epochs 2 --batch 16 --seq-len 256 --lr 1e-3 --warmup 30 --min-lr 5e-5"}
THREADS=${THREADS:-0}        # per training job; 0 = the machine's default
PARALLEL=${PARALLEL:-0}      # 1: run the three fine-tunes at once (many-core machines)
FT_TIMEOUT=${FT_TIMEOUT:-0}  # >0: stop a fine-tune (saving it) after this many seconds
# decoding: every evaluation run as "name|model|decoder|options". ReFusion at
# two threshold settings (the paper's benchmark style, scaled to 128-token
# answers), AR greedy, the MDM at two step budgets (LLaDA: blocks of 32).
GEN=${GEN_LENGTH:-128}
EVALS=${EVALS:-"refusion-0.9-0.4|refusion|refusion|--slot-size 8 --blocks 2 --slot-threshold 0.9 --token-threshold 0.4
refusion-0.7-0.2|refusion|refusion|--slot-size 8 --blocks 2 --slot-threshold 0.7 --token-threshold 0.2
ar|ar|ar|
mdm-128-steps|mdm|mdm|--blocks 4 --steps $GEN
mdm-32-steps|mdm|mdm|--blocks 4 --steps 32"}
LIMIT=${LIMIT:-0}
STAGES=${STAGES:-"tasks tokenizer train eval table"}
FORCE=${FORCE:-0}

want() { [[ " $STAGES " == *" $1 "* ]]; }
fresh() { [ "$FORCE" = 1 ] || [ ! -e "$1" ]; }
say() { echo "== $*" >&2; }

[ -x "$BIN" ] || bash scripts/build.sh
mkdir -p "$OUT/results"

if want tasks && fresh "$DATA/test.json"; then
  say "task suite: seed $SEED, $N_TRAIN train / $N_TEST test"
  "$BIN" tasks --seed "$SEED" --train "$N_TRAIN" --test "$N_TEST" -o "$DATA"
fi

if want tokenizer && fresh "$OUT/tokenizer/tokenizer.json"; then
  say "tokenizer: vocab $VOCAB from $DATA/train.json"
  "$BIN" tokenizer-train --input "$DATA/train.json" --vocab "$VOCAB" -o "$OUT/tokenizer"
fi

if want train; then
  thr=""
  [ "$THREADS" -gt 0 ] && thr="--threads $THREADS"
  if fresh "$OUT/base/model.safetensors"; then
    say "train the AR base: $CONFIG, $BASE_ARGS"
    # shellcheck disable=SC2086
    "$BIN" train --data "$DATA/train.json" --tokenizer "$OUT/tokenizer" --config "$CONFIG" \
      --objective ar --seed "$SEED" $BASE_ARGS $thr --log-every 50 -o "$OUT/base"
  fi
  finetune() {
    local obj=$1 extra=""
    # LLaDA's SFT pads every answer with EOS to the decoding length, so the
    # MDM learns to fill a fixed-length answer region
    [ "$obj" = mdm ] && extra="--mdm-pad $GEN"
    local stop=()
    [ "$FT_TIMEOUT" -gt 0 ] && stop=(timeout -s INT "$FT_TIMEOUT")
    say "fine-tune $obj from the base: $FT_ARGS"
    # shellcheck disable=SC2086
    "${stop[@]}" "$BIN" train --data "$DATA/train.json" --init "$OUT/base" --objective "$obj" \
      --seed "$SEED" $FT_ARGS $extra $thr --log-every 50 -o "$OUT/$obj"
  }
  pids=()
  for obj in refusion ar mdm; do
    if fresh "$OUT/$obj/model.safetensors"; then
      if [ "$PARALLEL" = 1 ]; then
        finetune "$obj" >"$OUT/$obj.train.log" 2>&1 &
        pids+=($!)
      else
        finetune "$obj"
      fi
    fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
fi

if want eval; then
  while IFS='|' read -r name model dec args; do
    [ -n "$name" ] || continue
    if fresh "$OUT/results/$name.json"; then
      say "eval $name: $model model, $dec decoder $args"
      # shellcheck disable=SC2086
      "$BIN" eval -m "$OUT/$model" --data "$DATA/test.json" --decoder "$dec" --gen-length "$GEN" \
        --limit "$LIMIT" $args --quiet -o "$OUT/results/$name"
    fi
  done <<< "$EVALS"
fi

if want table; then
  say "table and plot -> $OUT"
  node - "$OUT" "$EVALS" <<'EOF'
const fs = require('fs');
const out = process.argv[2];
const names = process.argv[3].split('\n').filter(l => l.trim()).map(l => l.split('|'));
const rows = [];
for (const [key, model, decoder] of names) {
  const f = `${out}/results/${key}.json`;
  if (!fs.existsSync(f)) { console.error(`refusion: ${f}: missing (run the eval stage)`); process.exit(1); }
  const d = JSON.parse(fs.readFileSync(f, 'utf8'));
  rows.push({key, name: key, model, decoder, settings: d.settings, ...d.metrics});
}
const pct = x => (100 * x).toFixed(1);
const fams = Object.keys(rows[0].families);
const ar = rows.find(r => r.decoder === 'ar').overall;
let md = '| run | model | ' + fams.join(' | ') + ' | overall | tokens/s | vs AR | TPF | tokens/call | latency (s) |\n';
md += '|---|---|' + fams.map(() => '---:|').join('') + '---:|---:|---:|---:|---:|---:|\n';
for (const r of rows) {
  const o = r.overall;
  md += `| ${r.name} | ${r.model} | ` + fams.map(f => pct(r.families[f].accuracy)).join(' | ') +
        ` | **${pct(o.accuracy)}** | ${o.tokens_per_s.toFixed(1)} | ${(o.tokens_per_s / ar.tokens_per_s).toFixed(2)}x |` +
        ` ${o.tpf.toFixed(2)} | ${o.tokens_per_call.toFixed(2)} | ${o.latency_s.toFixed(3)} |\n`;
}
// the paper's comparisons: ReFusion's first setting vs AR and vs each MDM run
const rf = rows.find(r => r.decoder === 'refusion').overall;
const cmp = (a, b) => ({points: 100 * (a.accuracy - b.accuracy), speedup: a.tokens_per_s / b.tokens_per_s});
const vsA = cmp(rf, ar);
const vsM = rows.filter(r => r.decoder === 'mdm').map(r => ({run: r.name, ...cmp(rf, r.overall)}));
const sign = x => (x >= 0 ? '+' : '') + x.toFixed(1);
md += `\n${rows.find(r => r.decoder === 'refusion').name} vs AR: ${sign(vsA.points)} accuracy points, ` +
      `${vsA.speedup.toFixed(2)}x throughput (paper: close in score, 2.33x).\n`;
for (const m of vsM)
  md += `${rows.find(r => r.decoder === 'refusion').name} vs ${m.run}: ${sign(m.points)} accuracy points, ` +
        `${m.speedup.toFixed(2)}x throughput (paper: +34%, >18x).\n`;
md += '\nSettings:\n' + rows.map(r => `- ${r.name}: \`${JSON.stringify(r.settings)}\``).join('\n') + '\n';
const tmp = (p, s) => { fs.writeFileSync(p + '.tmp', s); fs.renameSync(p + '.tmp', p); };
tmp(`${out}/table.md`, md);
tmp(`${out}/table.json`, JSON.stringify({rows, refusion_vs_mdm: vsM, refusion_vs_ar: vsA}, null, 1));
tmp(`${out}/speed_accuracy.dat`, rows.map(r =>
  `"${r.name}" ${r.overall.tokens_per_s / ar.tokens_per_s} ${100 * r.overall.accuracy}`).join('\n') + '\n');
process.stdout.write(md);
EOF
  gnuplot <<EOF
set terminal svg size 640,440 font "sans,12"
set output "$OUT/speed_accuracy.svg.tmp"
set title "Accuracy vs throughput (test set, $(nproc) CPU threads)"
set xlabel "throughput relative to AR (tokens/s / AR tokens/s)"
set ylabel "accuracy (%)"
set logscale x
set grid
set key off
set yrange [0:100]
plot "$OUT/speed_accuracy.dat" using 2:3 with points pt 7 ps 1.5, \
     "" using 2:3:1 with labels offset 0,1.2
EOF
  mv "$OUT/speed_accuracy.svg.tmp" "$OUT/speed_accuracy.svg"
  say "wrote $OUT/table.md, $OUT/table.json, $OUT/speed_accuracy.svg"
fi
