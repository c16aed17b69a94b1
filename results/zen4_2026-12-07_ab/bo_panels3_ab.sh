#!/bin/bash
# A: Q8_0 blocks-outside with 2 panels (main), B: 3 panels; 2 threads, ABBA x2
for b in A B B A A B B A; do
  bin=/work/main/build/bench_kernels_matmul; [ $b = B ] && bin=/tmp/bo3/build/bench_kernels_matmul
  for s in 3072x1024 1024x3072; do
    echo "== $b $s"; OMP_NUM_THREADS=2 OMP_PROC_BIND=true $bin --dtype q8_0 --shape $s --n 8,16 --tier avx512 2>&1 | grep -v "^#" | tail -4
  done
done
