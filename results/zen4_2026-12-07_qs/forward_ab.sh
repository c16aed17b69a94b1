#!/bin/bash
# A=<build dir of the base commit> B=<build dir of the new one>, run from the repository root;
# every run holds /tmp/rf-cpu.lock (nothing else timed at once)
# usage: forward_ab.sh MODEL DTYPE NS ROUNDS
m=$1; dt=$2; ns=$3; R=$4
one(){ OMP_NUM_THREADS=2 OMP_PROC_BIND=true flock /tmp/rf-cpu.lock $1/bench_model_forward --model $m --tier avx512 --dtype $dt --n $ns --decode 0 2>&1 | awk '/^ +[0-9]+ +[0-9.]+ +[0-9.]+ /{printf "n%s=%s ", $1, $2} END {print ""}'; }
for i in $(seq $R); do
  echo "A $(one $A)"; echo "B $(one $B)"; echo "B $(one $B)"; echo "A $(one $A)"
done
