#!/usr/bin/env bash
# bench_train_mpi.sh - data-parallel training throughput: 1 process vs 2 MPI
# ranks (one thread each) on the same global batch, the Allreduce time per
# step and the gradient bytes it moves, then a PROJECTION (a cost model, not a
# measurement) of the step time at 8 and 64 ranks.
#
#   scripts/bench_train_mpi.sh [BIN] [STEPS] [BATCH] [SEQ_LEN]
#   (defaults: build/refusion 12 16 256; the model is models/refusion-demo,
#    3.4M parameters, trained further on generated arithmetic data)
#
# The first 2 steps of each run are warm-up and not counted. On a machine
# with 2 cores shared with other jobs the figures are only indicative: the
# script prints the load average next to them.
set -eu
cd "$(dirname "$0")/.."
BIN=${1:-build/refusion}
STEPS=${2:-12}
BATCH=${3:-16}
SEQ=${4:-256}
command -v mpirun >/dev/null || { echo "mpirun not found (scripts/install-deps.sh installs openmpi-bin)"; exit 1; }
"$BIN" train --help | grep -q "This build: with MPI" || { echo "$BIN was built without MPI"; exit 1; }
T=$(mktemp -d /tmp/rf_bench_mpi.XXXXXX)
trap 'rm -rf "$T"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none

python3 - "$T/data.jsonl" <<'EOF'
import json, random, sys
random.seed(7)
with open(sys.argv[1], 'w') as f:
    for _ in range(2000):
        n = random.randint(8, 30)
        xs = [random.randint(1, 999) for _ in range(n)]
        f.write(json.dumps({"query": "Add these numbers: " + " + ".join(map(str, xs)),
                            "response": "The sum is %d, from %s." % (sum(xs), ", ".join(map(str, xs)))}) + "\n")
EOF

ARGS=(--data "$T/data.jsonl" --init models/refusion-demo --objective refusion --batch "$BATCH"
      --seq-len "$SEQ" --steps "$STEPS" --lr 1e-4 --threads 1 --no-plot -q --skip-long)
CMD1=("$BIN" train "${ARGS[@]}" -o "$T/one")
CMD2=(mpirun -np 2 --oversubscribe "$BIN" train "${ARGS[@]}" -o "$T/two")
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) before the runs"
echo "1 rank : OMP_NUM_THREADS=1 ${CMD1[*]}"
OMP_NUM_THREADS=1 "${CMD1[@]}"
echo "2 ranks: OMP_NUM_THREADS=1 ${CMD2[*]}"
OMP_NUM_THREADS=1 "${CMD2[@]}"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$T/one" "$T/two" <<'EOF'
import json, struct, sys
def run(d):  # tokens/s, s/step, Allreduce s/step, tokens/step over the steps after 2 warm-up steps
    dts, toks, comm = [], [], []
    prev = None
    for r in [l.split(',') for l in open(d + '/log.csv').read().split('\n')[1:] if l]:
        e = float(r[6])
        dt = e - prev if prev is not None else e
        prev = e
        dts.append(dt); toks.append(float(r[5]) * dt); comm.append(float(r[8]))
    dts, toks, comm = dts[2:], toks[2:], comm[2:]
    return sum(toks) / sum(dts), sum(dts) / len(dts), sum(comm) / len(comm), sum(toks) / len(toks)
def grad_bytes(d):
    b = open(d + '/model.safetensors', 'rb').read(8)
    n = struct.unpack('<Q', b)[0]
    h = json.loads(open(d + '/model.safetensors', 'rb').read(8 + n)[8:])
    return sum(v['data_offsets'][1] - v['data_offsets'][0] for k, v in h.items() if k != '__metadata__')
t1, s1, c1, tok = run(sys.argv[1])
t2, s2, c2, _ = run(sys.argv[2])
G = grad_bytes(sys.argv[1])
print()
print('MEASURED (this machine, loaded by other jobs; 1 thread per rank):')
print('  1 rank : %8.0f tokens/s  %.3f s/step' % (t1, s1))
print('  2 ranks: %8.0f tokens/s  %.3f s/step  (x%.2f)  Allreduce %.2f ms/step (%.1f%% of the step)'
      % (t2, s2, t2 / t1, c2 * 1e3, 100 * c2 / s2))
print('  gradient per step: %.2f MB (f32, one flat MPI_Allreduce), %.0f tokens per global batch' % (G / 1e6, tok))
print()
print('PROJECTION (a cost model, not measured): each rank keeps the 1-rank run\'s batch (weak')
print('scaling), compute = the measured 1-rank step, ring Allreduce 2(N-1)/N * bytes / B + 2(N-1) * a,')
print('not overlapped with the backward pass.')
for name, B, a in (('25 GbE (RoCE/TCP), B = 3.1 GB/s, a = 20 us', 3.1e9, 20e-6),
                   ('InfiniBand HDR 200 Gb/s, B = 25 GB/s, a = 2 us', 25e9, 2e-6)):
    print('  ' + name)
    for N in (8, 64):
        ar = 2 * (N - 1) / N * G / B + 2 * (N - 1) * a
        step = s1 + ar
        print('    %2d ranks: step %.3f s (Allreduce %.2f ms), %9.0f tokens/s, %.0f%% scaling efficiency'
              % (N, step, ar * 1e3, N * tok / step, 100 * s1 / step))
EOF
