#!/bin/bash
# A=<build dir of the base commit> B=<build dir of the new one>, run from the repository root;
# every run holds /tmp/rf-cpu.lock (nothing else timed at once).
# usage: kernel_ab_ratio.sh DTYPE SHAPE N ROUNDS
# Per round A B B A of bench_kernels_matmul (2 threads, tier avx512, one width N), the packed
# kernel's ms/call; prints B/A per round ((B1 + B2) / (A1 + A2)), sorted, and their median.
get() {
  OMP_NUM_THREADS=2 OMP_PROC_BIND=true flock /tmp/rf-cpu.lock $1/bench_kernels_matmul --dtype $2 --shape $3 --n $4 \
    --tier avx512 2>&1 | grep -E "p +$4 +[0-9.]+ " | awk '{for(i=1;i<=NF;i++) if ($i ~ /^Q.*p$/) {print $(i+2); exit}}'
}
rs=()
for r in $(seq $4); do
  a1=$(get $A $1 $2 $3); b1=$(get $B $1 $2 $3); b2=$(get $B $1 $2 $3); a2=$(get $A $1 $2 $3)
  rs+=($(echo "($b1+$b2)/($a1+$a2)" | bc -l))
done
printf '%s\n' "${rs[@]}" | sort -n | awk '{a[NR]=$1} END {printf "B/A per round: "; for(i=1;i<=NR;i++) printf "%.3f ", a[i];
  printf "\nmedian %.3f (%d rounds)\n", (NR%2? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2), NR}'
