#!/bin/bash
# A=<build dir of the base commit> B=<build dir of the new one>, run from the repository root;
# every run holds /tmp/rf-cpu.lock (nothing else timed at once)
# kernel_ab.sh DTYPE SHAPE NS: ABBA of bench_kernels_matmul, ms/call per n
for b in $A $B $B $A; do
  [ $b = $A ] && echo -n "A " || echo -n "B "
  OMP_NUM_THREADS=2 OMP_PROC_BIND=true flock /tmp/rf-cpu.lock $b/bench_kernels_matmul --dtype $1 --shape $2 --n $3 --tier avx512 2>&1 | grep -E "p +[0-9]+ +[0-9.]+ " | awk '{for(i=1;i<=NF;i++) if ($i ~ /^Q.*p$/) {printf "n%s=%s ", $(i+1), $(i+2); break}} END {print ""}'
done
