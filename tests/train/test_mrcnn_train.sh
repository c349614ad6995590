#!/usr/bin/env bash
# `mrcnn train` end to end on the tiny config and a synthetic shapes dataset (CPU):
#  - 2 ranks x 1 image == 1 rank x 2 images: same first update (gradients) to a
#    rounding bound, the same weights after 4 steps within float tolerance (10 steps
#    loosely: see below);
#  - 20 steps straight == 10 steps + --resume to 20: bit-identical weights and losses
#    (loader cursor, momentum, schedule restored);
#  - fp16: the dynamic loss scale settles below 2^16, the loss stays finite and falls;
#  - bf16 (rounded storage) stays within 5% of fp32 over 100 steps (20-step means, 8
#    images per step), loss falling;
#  - a training checkpoint loads as MODEL.WEIGHTS; OUTPUT_DIR is created with parents;
#  - out of memory names the buffer and the batch/size settings to lower;
#  - usage errors exit 2.
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# Under ASan, the fast unwinder stops inside Open MPI and its leaks then escape
# tests/lsan.supp; full unwinding lets the suppressions match.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
M=$BUILD/mrcnn P=$BUILD/mrcnn-prep
[ -x "$M" ] && [ -x "$P" ] || { echo "not built: $M / $P"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$M" train --help | grep -q -- "--comm-timeout" || { echo "FAIL: --help"; exit 1; }
"$M" train --bogus > /dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL: a bad option must exit 2"; exit 1; }
"$P" shapes --out "$tmp/raw" --train 32 --val 4 --size 128x128 > /dev/null 2>&1 || { echo "FAIL: shapes"; exit 1; }
mpirun --oversubscribe -np 2 "$P" coco --annotations "$tmp/raw/annotations/instances_train.json" --images "$tmp/raw/train" \
    --out "$tmp/shards" --name train --shards 2 > "$tmp/prep.log" 2>&1 || { echo "FAIL: coco"; cat "$tmp/prep.log"; exit 1; }
COMMON="--config $ROOT/configs/tiny.yaml --set DATASETS.TRAIN=$tmp/shards/train-index.h5 --set LOG_PERIOD=1
        --set SOLVER.CLIP_GRADIENTS.ENABLED=true --set SOLVER.CLIP_GRADIENTS.CLIP_VALUE=5 --set SOLVER.CHECKPOINT_PERIOD=10"
train() { # np out [args...]
    local np=$1 out=$2; shift 2
    local log=$tmp/${out//\//_}.log
    mpirun --oversubscribe -np "$np" "$M" train $COMMON --set OUTPUT_DIR="$tmp/$out" "$@" >> "$log" 2>&1 \
        || { echo "FAIL: train $out $*"; tail -30 "$log"; exit 1; }
}
train 1 w0 --max-steps 1 --set SOLVER.BASE_LR=0
# No clipping on the first update: it would hide a wrong gradient scale.
train 1 g1 --max-steps 1 --set SOLVER.WARMUP_ITERS=0 --set SOLVER.CLIP_GRADIENTS.ENABLED=false
train 2 g2 --max-steps 1 --set SOLVER.WARMUP_ITERS=0 --set SOLVER.CLIP_GRADIENTS.ENABLED=false --bucket-mb 0.05
train 1 k1 --max-steps 10 --set SOLVER.CHECKPOINT_PERIOD=1 --set SOLVER.CHECKPOINT_KEEP=10
train 2 k2 --max-steps 10 --set SOLVER.CHECKPOINT_PERIOD=1 --set SOLVER.CHECKPOINT_KEEP=10 --bucket-mb 0.05
train 1 straight --max-steps 20
train 1 resumed --max-steps 10
train 1 resumed --max-steps 20 --resume
# A training checkpoint is also a model checkpoint (MODEL.WEIGHTS, the model's loader).
train 1 "sub/dir/weights" --max-steps 1 --set MODEL.WEIGHTS="$tmp/straight/model_0000020.h5"
grep -q "initial weights: .*straight/model_0000020.h5" "$tmp/sub_dir_weights.log" || { echo "FAIL: MODEL.WEIGHTS"; exit 1; }
grep -q "gradient buckets: [1-9][0-9]* of [1-9][0-9]* all-reduces started during backward" "$tmp/k2.log" \
    || { echo "FAIL: no bucket started during backward (grad_ready hook)"; grep "gradient buckets" "$tmp/k2.log"; exit 1; }
grep -q "world size 2, per-rank batch 1 x 1 accumulation, global batch 2, .* [1-9][0-9] gradient buckets" "$tmp/k2.log" || { echo "FAIL: no world-size line"; cat "$tmp/k2.log"; exit 1; }
grep -q "resumed from .*model_0000010.h5 at step 10" "$tmp/resumed.log" || { echo "FAIL: resume"; cat "$tmp/resumed.log"; exit 1; }
# Out of memory names the buffer and the settings to lower (not under ASan: its
# shadow memory does not fit a virtual-memory limit).
if [ "${MODE:-release}" != sanitize ]; then
    # The limit leaves 800 MB beyond the mapped size of the CUDA libraries (GPU=1
    # builds link cuBLAS/cuDNN/NCCL, which map hundreds of MB at load).
    libs_kb=$(ldd "$M" | awk '/libcu|libnccl/ {print $3}' | xargs -r stat -L -c %s | awk '{s += $1} END {print int(s / 1024)}')
    ( ulimit -v $((800000 + ${libs_kb:-0})); "$M" train $COMMON --set OUTPUT_DIR="$tmp/oom" --set INPUT.MIN_SIZE_TRAIN=[1200] \
        --set INPUT.MAX_SIZE_TRAIN=2000 --set SOLVER.IMS_PER_BATCH=8 --max-steps 1 ) > "$tmp/oom.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && grep -q "out of .*memory .*for " "$tmp/oom.log" \
        && grep -q "mrcnn train: out of memory with 8 images per rank .*lower SOLVER.IMS_PER_BATCH or raise SOLVER.ACCUM_STEPS" "$tmp/oom.log" \
        || { echo "FAIL: out-of-memory message (rc $rc)"; tail -5 "$tmp/oom.log"; exit 1; }
    echo "out of memory: exit $rc, $(grep -c 'lower SOLVER' "$tmp/oom.log") advice line"
fi
BF="--set SOLVER.MAX_ITER=100 --set SOLVER.STEPS=[90] --set SOLVER.CHECKPOINT_PERIOD=0 --set SOLVER.IMS_PER_BATCH=8"
train 2 fp16 --max-steps 20 --set SOLVER.PRECISION=fp16
train 1 fp32 $BF
train 1 bf16 $BF --set SOLVER.PRECISION=bf16
$PY_TORCH - "$tmp" <<'PY' || exit 1
import json, sys
import h5py
import numpy as np
d = sys.argv[1]
def weights(run, step):
    with h5py.File(f"{d}/{run}/model_{step:07d}.h5", "r") as f:
        return {k: f["model"][k][()].astype(np.float64) for k in f["model"]}
def maxrel(a, b):
    num = max(np.abs(a[k] - b[k]).max() for k in a)
    den = max(np.abs(b[k]).max() for k in b)
    return num / den
w0, g1, g2 = weights("w0", 1), weights("g1", 1), weights("g2", 1)
d1 = {k: g1[k] - w0[k] for k in w0}; d2 = {k: g2[k] - w0[k] for k in w0}
# First update d = w1 - w0 (SGD, zero momentum, no clipping). The loss normalizers are
# batch-wide integer counts summed in double on both splits, and sampling is keyed by
# the global image index, so the two differ only by float rounding, per element:
#  - w1 = w0 - lr v and lr v are each rounded to float once per run: ulp(w1) + ulp(d);
#  - each gradient is a float sum taken in another order (per-rank image sums plus one
#    float addition in the all-reduce, against one sum over both images): a reordered
#    sum of K terms moves by ~u sqrt(K) of its terms (random-walk rounding, u = 2^-24);
#    the longest here are the stem's (2 images x 64 x 64 positions = 8192 terms), so
#    u sqrt(8192) = 5.4e-6 of each tensor's largest update (measured <= 6.4e-7 under
#    OPENBLAS_CORETYPE SkylakeX, Haswell, Zen, Sandybridge).
# Per tensor, not over the whole model: a wrong normalizer in a term with small
# gradients (the RPN's, the mask head's) moves only its own tensors, by O(1) of theirs.
U_SUM = 2.0 ** -24 * np.sqrt(2 * 64 * 64)
worst, where = 0.0, ""
for k in w0:
    a, b = g1[k].astype(np.float32), g2[k].astype(np.float32)
    storage = np.spacing(np.maximum(np.abs(a), np.abs(b))) + np.spacing(np.abs(d1[k]).astype(np.float32))
    scale = np.abs(d1[k]).max()
    excess = np.maximum(np.abs(d2[k] - d1[k]) - storage, 0).max() / max(scale, 1e-30)
    if excess > worst:
        worst, where = excess, k
print(f"2 ranks x 1 vs 1 x 2: first update, beyond the storage rounding: {worst:.2e} of the tensor's largest "
      f"update ({where or 'none'}; bound {U_SUM:.1e}); over the model max rel err {maxrel(d2, d1):.2e}")
assert worst <= U_SUM and max(np.abs(v).max() for v in d1.values()) > 0
# After K steps, relative to how far the weights moved. Float rounding differs between
# the splits (the sums run in another order), and sooner or later it flips a discrete
# choice (a proposal at the top-k edge, an IoU at the sampling threshold): from then on
# the runs differ by more than rounding. Steps 1..4 must agree to rounding; 10 loosely.
for k in (4, 10):
    a, b = weights("k1", k), weights("k2", k)
    e = max(np.abs(a[n] - b[n]).max() for n in a) / max(np.abs(a[n] - w0[n]).max() for n in a)
    print(f"2 ranks x 1 vs 1 x 2: weights after {k} steps max |diff| / max |moved| {e:.2e}")
    assert e < (1e-4 if k == 4 else 2e-2)
a, b = weights("straight", 20), weights("resumed", 20)
assert all(np.array_equal(a[k], b[k]) for k in a), "resumed weights differ"
def rows(run):
    return {j["step"]: j for j in map(json.loads, open(f"{d}/{run}/metrics.json"))}
s, r = rows("straight"), rows("resumed")
assert all(s[i]["total_loss"] == r[i]["total_loss"] for i in range(1, 21)), "resumed losses differ"
print("resume at step 10: weights and losses of steps 11..20 bit-identical")
# The host's round trips per step (the backend's counters): logged every step, each read
# is a wait, and a step's count is a property of the step, the same after a resume.
assert all(0 <= s[i]["reads_per_step"] <= s[i]["syncs_per_step"] for i in s), "syncs/reads per step missing or inconsistent"
assert all(s[i]["syncs_per_step"] == r[i]["syncs_per_step"] and s[i]["reads_per_step"] == r[i]["reads_per_step"]
           for i in range(12, 21)), "a resumed step waits for the device a different number of times"
print(f"host round trips per step (CPU backend, counted as on a GPU): {s[20]['syncs_per_step']:g} syncs, "
      f"{s[20]['reads_per_step']:g} reads")
h = rows("fp16")
assert sorted(h) == list(range(1, 21)) and np.isfinite(h[20]["total_loss"]), h[20]
assert h[20]["loss_scale"] < 65536 and h[20]["skipped"] < 10, (h[20]["loss_scale"], h[20]["skipped"])
# The loss falls: means over the first and last 5 logged steps (skipped steps log null;
# single steps differ by their 2 images more than 20 steps of learning). Over 13 seeds
# (SEED=1..12, 42) the total's last/first was 0.65 +- 0.10 (max 0.82) and the RPN
# objectness's 0.40 +- 0.07 (max 0.59); a run that does not learn (gradients unscaled
# twice) keeps 0.96 +- 0.04 and 1.00 +- 0.005. So: the total falls (3 sd from 1), and
# the objectness falls below 0.8 of its start (6 sd from the learning runs, 40 from not
# learning: the total alone is too noisy to tell a stalled run in 20 steps).
logged = [h[i] for i in range(1, 21) if h[i]["total_loss"] is not None]
fall = {t: np.mean([r[t] for r in logged[-5:]]) / np.mean([r[t] for r in logged[:5]])
        for t in ("total_loss", "loss_objectness")}
print(f"fp16 (loss scaled in the model's backward): scale {h[20]['loss_scale']:g} after {h[20]['skipped']} skipped steps, "
      f"last/first 5-step mean: total {fall['total_loss']:.3f}, objectness {fall['loss_objectness']:.3f}")
assert len(logged) >= 10 and fall["total_loss"] < 1 and fall["loss_objectness"] < 0.8, fall
f32, b16 = rows("fp32"), rows("bf16")
worst = 0
for w in range(5):  # 20-step means: single steps differ by their sampled ROIs, not by precision
    la = np.mean([f32[i]["total_loss"] for i in range(w * 20 + 1, w * 20 + 21)])
    lb = np.mean([b16[i]["total_loss"] for i in range(w * 20 + 1, w * 20 + 21)])
    worst = max(worst, abs(lb - la) / la)
first = np.mean([f32[i]["total_loss"] for i in range(1, 11)]); last = np.mean([f32[i]["total_loss"] for i in range(91, 101)])
print(f"bf16 vs fp32, 100 steps: worst 20-step mean loss rel diff {worst:.2%}; fp32 {first:.3f} -> {last:.3f}")
assert worst < 0.05 and last < first
assert any(f32[i]["total_loss"] != b16[i]["total_loss"] for i in range(1, 101)), "bf16 identical to fp32"
PY
echo PASS
