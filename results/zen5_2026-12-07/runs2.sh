#!/usr/bin/env bash
# The runs of runs2.txt in a results folder: the shipped demo against AR with its own setting (adaptive up to 4) at
# 1 and 2 threads, a second Q8_0 pair (slot 8 fixed and adaptive), the avx2 tier's Q8_0 (REFUSION_CPU=avx2), and
# c(8) / c(16) of the three grown models; every run holds /tmp/rf-cpu.lock.
#   bash results/zen5_2026-12-07/runs2.sh RESULTS_FOLDER > RESULTS_FOLDER/runs2.txt
# (the top folder's JSONs of the Q8_0 pair end in -r2: written as the second pair beside grow_ab/'s first)
set -u
cd "$(dirname "$0")/../.."
R=${1:?the results folder}
AB=build/bench_decode_ab
D=runs/grow/data/test.json
run() { flock /tmp/rf-cpu.lock nice "$@"; }
echo "# $(date -u +%F' '%H:%M) UTC start; build $(git rev-parse --short HEAD)"
for t in 1 2; do
  run $AB -m models/refusion-demo --data $D --limit 48 --threads $t --a "--decoder ar -n 128" --b "--rolling --slot-size 4 --slot-threshold 0.5 --draft-policy adaptive -n 128" --json $R/demo-adaptive4-t$t.json | tail -3
done
for pol in fixed adaptive; do
  run $AB -m runs/grow/demo-0.6b-q8_0.gguf --data $D --limit 24 --threads 2 --a "--decoder ar -n 128" --b "--rolling --slot-size 8 --slot-threshold 0.5 --draft-policy $pol -n 128" --json $R/q8_0-s8-$pol.json | tail -3
done
for s in 4 8; do
  run env REFUSION_CPU=avx2 $AB -m runs/grow/demo-0.6b-q8_0.gguf --data $D --limit 24 --threads 2 --a "--decoder ar -n 128" --b "--rolling --slot-size $s --slot-threshold 0.5 --draft-policy fixed -n 128" --json $R/avx2-q8_0-s$s-fixed.json | tail -3
done
run env REFUSION_CPU=avx2 $AB -m runs/grow/demo-0.6b-q8_0.gguf --data $D --limit 24 --threads 2 --a "--decoder ar -n 128" --b "--rolling --slot-size 8 --slot-threshold 0.5 --draft-policy adaptive -n 128" --json $R/avx2-q8_0-s8-adaptive.json | tail -3
for m in demo-0.6b-q8_0.gguf demo-0.6b-q4_0.gguf demo-0.6b-bf16; do
  echo "== $m"
  run build/bench_model_forward_ab -m runs/grow/$m --n 8,16 --rounds 10 --threads 2 | tail -4
done
echo "# $(date -u +%F' '%H:%M) UTC end"
