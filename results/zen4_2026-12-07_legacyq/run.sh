#!/usr/bin/env bash
# The legacy-quant panels before and after, run from the repository root:
# B = bench_kernels_matmul built at 48f9ec0 (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K
# decoded per block), A = built at c3d90c8 (the same rows, then the
# packed "p" rows), each binary copied to /tmp. Per shape and thread count
# four runs, in the order B A A B, none overlapping another timed run.
set -u
B=${B:-/tmp/rf_bench_before_48f9ec0}
A=${A:-/tmp/rf_bench_after_c3d90c8}
OUT=results/zen4_2026-12-07_legacyq
for shape in 151936x1024 1024x1024; do
  for th in 1 2; do
    f=$OUT/legacyq_${shape}_t${th}.txt
    : > "$f"
    for side in B A A B; do
      bin=$B; [ "$side" = A ] && bin=$A
      cmd="OMP_NUM_THREADS=$th OMP_PROC_BIND=true $bin --dtype q4_1,q5_0,q5_1,q2_k,q3_k --shape $shape --n 1,16 --tier avx512,avx2"
      echo "== $side: $cmd" >> "$f"
      OMP_NUM_THREADS=$th OMP_PROC_BIND=true flock /tmp/rf-cpu.lock nice -n 5 "$bin" --dtype q4_1,q5_0,q5_1,q2_k,q3_k \
        --shape "$shape" --n 1,16 --tier avx512,avx2 >> "$f" 2>&1
    done
  done
done
