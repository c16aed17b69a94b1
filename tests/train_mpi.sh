#!/usr/bin/env bash
# train_mpi.sh - data-parallel `refusion train` under Open MPI:
#  - for each objective (refusion, refusion + aux AR, ar, mdm): 2 ranks equal
#    1 rank with the same global batch (--batch 8 --accum 2, and an uneven
#    --batch 7 split 3 + 4): every logged loss and grad norm, and the final
#    weights, to the tolerance below;
#  - the gradient sum in one Allreduce after the backward (the default) and
#    in buckets overlapped with it (--allreduce buckets) give the same bits:
#    weights and AdamW moments, with one bucket per layer and with 1 MB;
#  - resume across rank counts: 2 ranks stop at step 3, 1 rank resumes to 6,
#    and 1 -> 2 the other way; both end at the straight run's weights;
#  - rank 0 alone writes: rank 1 given another -o writes nothing there;
#  - ranks that disagree (other data, other options) or fail alone (missing
#    file) end the run with one clear message, exit 1, nothing written;
#  - Ctrl-C on mpirun saves (SIGTERM to every rank) and names the step;
#  - a rank killed with SIGKILL ends the whole job (mpirun's error handler)
#    with a message naming the dead process, within a timeout;
#  - `--mpi` outside mpirun runs as one process (MPI singleton).
#
# Tolerance. The two runs draw the same examples and masks (per-example
# seeds) and give every token the same loss weight, so only float summation
# order differs: 1 rank sums each weight gradient over all tokens of the
# micro-batch in one gemm, 2 ranks sum two halves and add them (Allreduce).
# That is a relative difference of ~1e-7 in a gradient, which AdamW turns
# into update differences of the same relative size (its update is
# m / sqrt(v), scale-free) except in entries whose gradient is rounding
# noise. The checks: logged loss within 1e-4 relative (measured ~1e-6), and
# the weights' difference below 1e-3 of their norm in L2 (measured ~1e-6;
# one sign-flipped noise entry moves a weight by 2 lr = 6e-3 absolute, so no
# max-abs bound tighter than that could be justified). A wrong shard, seed
# or normalisation moves the loss by more than 1e-2 (break the shard split
# in rf_trainer_step and see these checks fail).
#
# Skipped (exit 77) only when mpirun is not installed (scripts/install-deps.sh
# installs openmpi-bin libopenmpi-dev).
set -u
if ! command -v mpirun >/dev/null 2>&1; then
  echo "train_mpi: SKIPPED: mpirun not found (install openmpi-bin libopenmpi-dev: scripts/install-deps.sh)"
  exit 77
fi
. "$(dirname "$0")/helpers/common.sh"
rf_test_setup train_mpi

# root in containers; the shared-memory transport without the ptrace-based
# single copy (not allowed in most containers); no network interfaces needed
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl=self,vader
MPI=(mpirun --oversubscribe --allow-run-as-root)

"$BIN" train --help | grep -q "This build: with MPI" ||
  { echo "FAIL: mpirun is installed but $BIN was built without MPI (reconfigure with libopenmpi-dev)" >&2; exit 1; }

rf_py - "$T" <<'EOF' || { echo "FAIL: python3 needed to write the data" >&2; exit 1; }
import json, sys
from reverse_data import records
recs = records(60)
json.dump(recs, open(sys.argv[1] + '/data.json', 'w'))
recs[5]["response"] = "0"
json.dump(recs, open(sys.argv[1] + '/other.json', 'w'))
EOF
"$BIN" tokenizer-train --input "$T/data.json" --vocab 300 -o "$T/tok" >/dev/null 2>&1 || bad "tokenizer-train"

# compare.py A B: logged losses and final weights of two runs within the tolerance
cat >"$T/compare.py" <<'EOF'
import json, math, struct, sys
def log(d):
    rows = [l.split(',') for l in open(d + '/log.csv').read().split('\n')[1:] if l]
    return [(int(r[0]), float(r[2]), float(r[7])) for r in rows]
def weights(d):
    b = open(d + '/model.safetensors', 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == '__metadata__': continue
        s, e = v['data_offsets']
        out[k] = struct.unpack('<%df' % ((e - s) // 4), b[8 + n + s:8 + n + e])
    return out
a, b = sys.argv[1], sys.argv[2]
la, lb = log(a), log(b)
if [r[0] for r in la] != [r[0] for r in lb]:
    print('steps differ: %d vs %d rows' % (len(la), len(lb))); sys.exit(1)
lerr = max(abs(x[1] - y[1]) / max(abs(x[1]), 1e-12) for x, y in zip(la, lb))
gerr = max(abs(x[2] - y[2]) / max(abs(x[2]), 1e-12) for x, y in zip(la, lb))
wa, wb = weights(a), weights(b)
if sorted(wa) != sorted(wb):
    print('tensor names differ'); sys.exit(1)
num = den = mx = 0.0
for k in wa:
    for x, y in zip(wa[k], wb[k]):
        num += (x - y) ** 2; den += x * x; mx = max(mx, abs(x - y))
werr = math.sqrt(num / den)
print('loss rel err %.1e, grad-norm rel err %.1e, weights rel L2 err %.1e (max abs %.1e)' % (lerr, gerr, werr, mx))
sys.exit(0 if lerr < 1e-4 and gerr < 1e-3 and werr < 1e-3 else 1)
EOF

COMMON=(--data "$T/data.json" --tokenizer "$T/tok" --config tiny --seq-len 48 --lr 3e-3 --threads 1
        --slot-sizes 4,8 --no-plot -q --seed 5)

# ---- 2 ranks == 1 rank, per objective -------------------------------------------------
run_pair() { # name args...
  local name=$1
  shift
  "$BIN" train "${COMMON[@]}" "$@" -o "$T/one_$name" 2>"$T/err" ||
    { bad "$name: 1 rank: $(cat "$T/err")"; return; }
  "${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" "$@" -o "$T/two_$name" >"$T/out" 2>"$T/err" ||
    { bad "$name: 2 ranks: $(cat "$T/out" "$T/err")"; return; }
  if python3 "$T/compare.py" "$T/one_$name" "$T/two_$name" >"$T/cmp"; then
    ok
    echo "$name: 2 ranks vs 1: $(cat "$T/cmp")"
  else
    bad "$name: 2 ranks differ from 1: $(cat "$T/cmp")"
  fi
}
run_pair refusion --objective refusion --batch 8 --accum 2 --steps 6
run_pair aux --objective refusion --aux-ar 0.5 --batch 8 --steps 4
run_pair ar --objective ar --batch 8 --accum 2 --steps 6
run_pair mdm --objective mdm --batch 8 --steps 4
run_pair uneven --objective refusion --batch 7 --steps 4
run_pair buckets --objective refusion --batch 8 --accum 2 --steps 6 --allreduce buckets

# ---- buckets == flat, bit for bit: each float is the same sum of the two ranks' values ---
# (a bucket started before the backward finished it would miss the last layers' terms)
# optsame A B: model.safetensors and optimizer.bin equal but for its elapsed seconds (bytes 80-87)
optsame() {
  cmp -s "$1/model.safetensors" "$2/model.safetensors" &&
    cmp -s <(head -c 80 "$1/optimizer.bin") <(head -c 80 "$2/optimizer.bin") &&
    cmp -s <(tail -c +89 "$1/optimizer.bin") <(tail -c +89 "$2/optimizer.bin")
}
B=(--objective refusion --aux-ar 0.5 --batch 8 --accum 2 --steps 3)
"${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" "${B[@]}" --allreduce flat -o "$T/flat" >"$T/out" 2>&1 ||
  bad "--allreduce flat: $(cat "$T/out")"
for mb in 0.0001 1; do
  "${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" "${B[@]}" --allreduce buckets --bucket-mb $mb -o "$T/bk$mb" \
    >"$T/out" 2>&1 || bad "--allreduce buckets --bucket-mb $mb: $(cat "$T/out")"
  optsame "$T/flat" "$T/bk$mb" && ok && echo "buckets of >= $mb MB: the same bits as flat" ||
    bad "buckets of >= $mb MB differ from flat"
done

# ---- resume across rank counts ---------------------------------------------------------
R=(--objective refusion --batch 8 --steps 6 --warmup 2)
"$BIN" train "${COMMON[@]}" "${R[@]}" -o "$T/straight" 2>"$T/err" || bad "straight: $(cat "$T/err")"
"${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" "${R[@]}" --stop-at 3 -o "$T/r21" >"$T/out" 2>&1 ||
  bad "2 ranks, first half: $(cat "$T/out")"
"$BIN" train "${COMMON[@]}" "${R[@]}" --resume -o "$T/r21" 2>"$T/err" || bad "1 rank resume: $(cat "$T/err")"
python3 "$T/compare.py" "$T/straight" "$T/r21" >"$T/cmp" && ok && echo "2 ranks then 1: $(cat "$T/cmp")" ||
  bad "2 ranks -> resume on 1 differs from the straight run: $(cat "$T/cmp")"
"$BIN" train "${COMMON[@]}" "${R[@]}" --stop-at 3 -o "$T/r12" 2>"$T/err" || bad "1 rank, first half: $(cat "$T/err")"
"${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" "${R[@]}" --resume -o "$T/r12" >"$T/out" 2>&1 ||
  bad "2 ranks resume: $(cat "$T/out")"
python3 "$T/compare.py" "$T/straight" "$T/r12" >"$T/cmp" && ok && echo "1 rank then 2: $(cat "$T/cmp")" ||
  bad "1 rank -> resume on 2 differs from the straight run: $(cat "$T/cmp")"

# ---- rank 0 alone writes ---------------------------------------------------------------
"${MPI[@]}" -np 1 "$BIN" train "${COMMON[@]}" --batch 8 --steps 2 --save-every 1 -o "$T/w0" : \
  -np 1 "$BIN" train "${COMMON[@]}" --batch 8 --steps 2 --save-every 1 -o "$T/w1" >"$T/out" 2>&1 ||
  bad "MPMD run: $(cat "$T/out")"
[ -s "$T/w0/model.safetensors" ] && [ "$(wc -l <"$T/w0/log.csv")" -eq 3 ] && ok || bad "rank 0 wrote no checkpoint/log"
[ ! -e "$T/w1" ] && ok || bad "rank 1 wrote into its -o: $(ls -R "$T/w1")"

# ---- disagreement and lone failures: one clear message, exit 1, nothing written ---------
refused() { # needle args-of-rank-1...
  local needle=$1
  shift
  rm -rf "$T/dis"
  "${MPI[@]}" -np 1 "$BIN" train "${COMMON[@]}" --batch 8 --steps 2 -o "$T/dis" : \
    -np 1 "$BIN" train "${COMMON[@]}" --batch 8 --steps 2 "$@" -o "$T/dis" >"$T/out" 2>&1
  local rc=$?
  if [ $rc -ne 1 ]; then bad "rank 1 with $*: exit $rc (want 1): $(cat "$T/out")"; return; fi
  grep -q "$needle" "$T/out" || { bad "rank 1 with $*: message lacks '$needle': $(cat "$T/out")"; return; }
  [ ! -e "$T/dis" ] || { bad "rank 1 with $*: output written"; return; }
  ok
  echo "rank 1 with $*: $(grep -m1 "$needle" "$T/out")"
}
refused "rank 1: the training data (after tokenisation) differs from rank 0's" --data "$T/other.json"
refused "rank 1: the options or the model config differs from rank 0's" --lr 1e-3
refused "rank 0: rank 1 of 2 failed to read its inputs" --data "$T/missing.json"
grep -q "rank 1: .*missing.json: cannot open" "$T/out" && ok || bad "rank 1 did not name its missing file: $(cat "$T/out")"

# ---- Ctrl-C on mpirun saves: mpirun sends SIGTERM to the ranks, which
# finish the step together (the stop request is reduced with the losses)
# and rank 0 saves; mpirun itself then reports the job as aborted ---------------------------
"${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" --batch 8 --steps 100000 -o "$T/ctrlc" >"$T/out" 2>&1 &
mpid=$!
for _ in $(seq 1 600); do
  [ -f "$T/ctrlc/log.csv" ] && [ "$(wc -l <"$T/ctrlc/log.csv")" -ge 3 ] && break
  sleep 0.1
done
kill -INT $mpid
wait $mpid
grep -q "interrupted: saved step" "$T/out" && [ -s "$T/ctrlc/optimizer.bin" ] && [ -s "$T/ctrlc/model.safetensors" ] &&
  ok || bad "Ctrl-C on mpirun saved nothing: $(tail -c 400 "$T/out")"

# ---- a killed rank ends the job ----------------------------------------------------------
"${MPI[@]}" -np 2 "$BIN" train "${COMMON[@]}" --batch 8 --steps 100000 -o "$T/kill" >"$T/out" 2>&1 &
mpid=$!
for _ in $(seq 1 600); do
  [ -f "$T/kill/log.csv" ] && [ "$(wc -l <"$T/kill/log.csv")" -ge 3 ] && break
  sleep 0.1
done
victim=""
for p in $(ps -o pid= --ppid $mpid); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
done
if [ -z "$victim" ]; then
  bad "rank 1's process not found under mpirun $mpid"
  kill $mpid 2>/dev/null
else
  kill -9 "$victim"
  for _ in $(seq 1 600); do kill -0 $mpid 2>/dev/null || break; sleep 0.1; done
  if kill -0 $mpid 2>/dev/null; then
    bad "mpirun still running 60 s after rank 1 was killed"
    kill $mpid
  else
    wait $mpid
    rc=$?
    [ $rc -ne 0 ] && grep -qiE "signal 9|killed" "$T/out" && ok &&
      echo "killed rank: exit $rc, $(grep -m1 -iE "signal 9|killed" "$T/out" | sed 's/^ *//')" ||
      bad "killed rank: exit $rc, output: $(cat "$T/out")"
  fi
fi
wait 2>/dev/null

# ---- --mpi outside mpirun: one process ---------------------------------------------------
"$BIN" train "${COMMON[@]}" --batch 8 --steps 2 --mpi -o "$T/single" >"$T/out" 2>&1 &&
  [ -s "$T/single/model.safetensors" ] && ok || bad "--mpi as a singleton: $(cat "$T/out")"

echo "train_mpi: $pass passed, $fails failed"
[ $fails -eq 0 ]
