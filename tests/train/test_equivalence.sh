#!/usr/bin/env bash
# Data-parallel equivalence on the CPU (stand-in model, see prog_standin.c):
# 2 ranks x 1 image == 1 rank x 2 images, and 3 x 1 == 1 x 3: the same gradients
# (weights after one step, no warmup) and the same weights and losses after 20 steps;
# and gradient accumulation: 1 rank x 2 micro-batches == 2 ranks x 1.
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# Under ASan, the fast unwinder stops inside Open MPI and its leaks then escape
# tests/lsan.supp; full unwinding lets the suppressions match.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
prog=$BUILD/tests/train/prog_standin
[ -x "$prog" ] || { echo "not built: $prog"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run() { # np ims name steps [extra...]
    local np=$1 ims=$2 name=$3 steps=$4; shift 4
    mpirun --oversubscribe -np "$np" "$prog" "$tmp/$name" --set SOLVER.IMS_PER_BATCH=$ims --max-steps "$steps" \
        --dump "$tmp/$name.w" "$@" > "$tmp/$name.log" 2>&1 || { echo "FAIL: run $name"; cat "$tmp/$name.log"; exit 1; }
}
for n in 2 3; do
    run 1 $n w0_$n 1 --set SOLVER.BASE_LR=0
    run 1 $n g1_$n 1 --set SOLVER.WARMUP_ITERS=0
    run $n $n gN_$n 1 --set SOLVER.WARMUP_ITERS=0
    run 1 $n k1_$n 20
    run $n $n kN_$n 20
done
# Gradient accumulation: 1 rank x 2 micro-batches of 1 image == 2 ranks x 1 image
# (images with equal row counts, so a micro-batch normalizer equals the batch's).
run 1 2 acc1 20 --fixed-rows --set SOLVER.ACCUM_STEPS=2
run 2 2 acc2 20 --fixed-rows
grep -q "per-rank batch 1 x 2 accumulation, global batch 2" "$tmp/acc1.log" || { echo "FAIL: accumulation line"; cat "$tmp/acc1.log"; exit 1; }
# SOLVER.CUDA_GRAPH=on on a backend without graphs (graph_begin returns 0, as the CPU's):
# a shape key's first step warms up, its second finds no capture, graphs go off; the weights are
# bit for bit those of the run without graphs (k1_2, auto = off on this backend).
run 1 2 graph_on 20 --set SOLVER.CUDA_GRAPH=on
cmp -s "$tmp/graph_on.w" "$tmp/k1_2.w" || { echo "FAIL: SOLVER.CUDA_GRAPH=on changed the weights"; cat "$tmp/graph_on.log"; exit 1; }
grep -q "CUDA graphs: on (SOLVER.CUDA_GRAPH=on" "$tmp/graph_on.log" && grep -q "CUDA graphs: off from step [0-9]*: the backend does not capture" "$tmp/graph_on.log" &&
    grep -q "CUDA graphs: off (SOLVER.CUDA_GRAPH=auto" "$tmp/k1_2.log" || { echo "FAIL: CUDA graphs log lines"; cat "$tmp/graph_on.log"; exit 1; }
$PY_COCO - "$tmp" <<'PY' || exit 1
import json, sys
import numpy as np
d = sys.argv[1]
w = lambda n: np.fromfile(f"{d}/{n}.w", dtype=np.float32).astype(np.float64)
def rel(a, b): return np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)
bad = 0
for n in (2, 3):
    g1, gN = w(f"g1_{n}") - w(f"w0_{n}"), w(f"gN_{n}") - w(f"w0_{n}")
    e = rel(gN, g1)
    print(f"{n} ranks x 1 vs 1 x {n}: gradient (first update) max rel err {e:.2e}")
    bad += e > 1e-5 or np.abs(g1).max() == 0
    e = rel(w(f"kN_{n}"), w(f"k1_{n}"))
    print(f"{n} ranks x 1 vs 1 x {n}: weights after 20 steps max rel err {e:.2e}")
    bad += e > 1e-5
    l1 = [json.loads(l)["total_loss"] for l in open(f"{d}/k1_{n}/metrics.json")]
    lN = [json.loads(l)["total_loss"] for l in open(f"{d}/kN_{n}/metrics.json")]
    e = max(abs(a - b) / abs(a) for a, b in zip(l1, lN))
    print(f"{n} ranks: losses over 20 steps max rel diff {e:.2e} (first {l1[0]:.4f}, last {l1[-1]:.4f})")
    bad += len(l1) != 20 or len(lN) != 20 or e > 1e-5 or not l1[-1] < l1[0]
e = rel(w("acc1"), w("acc2"))
print(f"1 rank x 2 accumulated vs 2 ranks x 1: weights after 20 steps max rel err {e:.2e}")
bad += e > 1e-5
sys.exit(1 if bad else 0)
PY
echo PASS
