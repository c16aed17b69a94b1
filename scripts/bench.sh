#!/usr/bin/env bash
# Run every benchmark and print the figures the README quotes. Takes several
# minutes and wants a quiet machine (2 threads). Writes nothing in the repo;
# checkpoints for the forward benchmark go to /tmp/rfbench (reused).
#   scripts/bench.sh            # kernels, 0.6B forward + AR decode, tokenizer, training, decoding
#   RF8B=/tmp/rf8b scripts/bench.sh   # also the 8B shape (make it first with
#                                     # refusion init --preset 8b -o /tmp/rf8b --shard-mb 4000)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
B=build
# kernels and forward: every CPU tier this machine has (avx2, avx512; the
# tier is printed per figure) and bf16, Q8_0, Q4_0 weights
echo "### matmul kernels"
$B/bench_kernels_matmul
echo "### forward pass, AR decode"
if [ -n "${RF8B:-}" ]; then $B/bench_model_forward --8b "$RF8B"; else $B/bench_model_forward; fi
echo "### tokenizer"
bash scripts/tokenizer/bench.sh "$B"
echo "### training"
$B/bench_train_step
echo "### decoding: ReFusion vs AR on the demo model"
$B/bench_decode_speed -m models/refusion-demo
echo "### decoding replay: the demo model's call shapes replayed at the 0.6B / 8B shapes (projections)"
$B/refusion tasks --seed 1 --train 100 --test 300 -o /tmp/rfbench/replay-tasks >/dev/null
echo "$B/bench_decode_replay -m models/refusion-demo --data /tmp/rfbench/replay-tasks/test.json -n 30${RF8B:+ -8b $RF8B}"
$B/bench_decode_replay -m models/refusion-demo --data /tmp/rfbench/replay-tasks/test.json -n 30 ${RF8B:+-8b "$RF8B"}
