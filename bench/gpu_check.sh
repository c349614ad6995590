#!/usr/bin/env bash
# The GPU check: one call on the GPU host answers everything, from a build made
# elsewhere (bench/README.md). In order, each step bounded in time:
#   1. the device and the libraries the programs resolve;
#   2. the CUDA op tests (every op against the CPU backend, fp32/fp16/bf16);
#   3. the op benchmark at R50-FPN shapes (bench_gpu_ops), per dtype in BENCH_DTYPES;
#   4. torchvision's Mask R-CNN on the training benchmark's workload
#      (bench/torchvision_bench.py), in the same call as 5, so that the two throughputs
#      are a ratio measured side by side;
#   5. the training benchmark, when the build's `mrcnn` has `bench train`;
#   6. a training smoke run: `mrcnn train` on configs/tiny.yaml with MODEL.DEVICE=cuda for
#      SMOKE_STEPS (20) steps on a synthetic shapes set made on the spot.
# The full log goes to $GPU_CHECK_OUT/gpu_check.log (default ./gpu-check-out; give
# GPU_CHECK_OUT=$OUT on the device tool); a short table is printed last and saved as
# summary.txt beside it.
#
# env: BUILD (default: the build packed in .gpu-pack/pack.tar.xz, unpacked into
# .gpu-pack/root; else build/release), BENCH_DTYPES
# ("bf16"), BENCH_ITERS (20), TRAIN_ARGS (arguments of `mrcnn bench train`), TV_ARGS
# ("8 800 1216 bf16"), SKIP_TV=1, SKIP_SMOKE=1, SMOKE_STEPS, GPU_CHECK_BUDGET (seconds for the whole script, 540).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
T0=$(date +%s)
BUDGET=${GPU_CHECK_BUDGET:-540}
OUTDIR=${GPU_CHECK_OUT:-./gpu-check-out}
mkdir -p "$OUTDIR"
LOG=$OUTDIR/gpu_check.log
SUMMARY=$OUTDIR/summary.txt
: > "$LOG"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$LOG"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
# Runs a step with a time limit bounded by what is left of the budget; output to the log.
step() {
    local name=$1 limit=$2
    shift 2
    local l
    l=$(left)
    [ "$l" -lt "$limit" ] && limit=$l
    if [ "$limit" -lt 20 ]; then
        say "== $name: skipped, ${l}s of the budget left"
        return 124
    fi
    say "== $name (limit ${limit}s): $*"
    local t=$(date +%s)
    timeout "$limit" "$@" >> "$LOG" 2>&1
    local rc=$?
    say "== $name: rc=$rc in $(($(date +%s) - t))s"
    return $rc
}

# ---- 0. the build: the carried pack (bench/gpu_pack.sh), unpacked beside the tree, else $BUILD
LIBDIR="" MPIDIR=.mpi
if [ -z "${BUILD:-}" ] && [ -f .gpu-pack/pack.tar.xz ]; then
    rm -rf .gpu-pack/root && mkdir -p .gpu-pack/root
    tar -xJf .gpu-pack/pack.tar.xz -C .gpu-pack/root || { say "gpu_check: cannot unpack .gpu-pack/pack.tar.xz"; exit 1; }
    BUILD=.gpu-pack/root/$(cat .gpu-pack/root/BUILD)
    LIBDIR=$ROOT/.gpu-pack/root/lib
    MPIDIR=.gpu-pack/root/.mpi
fi
BUILD=${BUILD:-build/release}
[ -f "$MPIDIR/env.sh" ] && source "$MPIDIR/env.sh"
export LD_LIBRARY_PATH=$ROOT/$BUILD${LIBDIR:+:$LIBDIR}:/usr/local/cuda/lib64:/usr/local/cuda-13.0/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
say "gpu_check: $(date -u '+%F %T') UTC, build $BUILD, log $LOG"

# ---- 1. device and libraries ----------------------------------------------------------------
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi failed"; } >> "$LOG"
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
unresolved=""
for f in "$BUILD/tests/cuda/test_cuda_ops" "$BUILD/bench/bench_gpu_ops" "$BUILD/mrcnn"; do
    [ -x "$f" ] || { say "missing program: $f"; continue; }
    nf=$(ldd "$f" | grep "not found")
    [ -n "$nf" ] && unresolved="$unresolved $(basename "$f"): $nf;"
done
ldd "$BUILD/libmrcnn_cuda.so" >> "$LOG" 2>&1
[ -n "$unresolved" ] && say "unresolved libraries:$unresolved"

# ---- 2. CUDA op tests -------------------------------------------------------------------------
test_status="not run"
if [ -x "$BUILD/tests/cuda/test_cuda_ops" ]; then
    step "cuda op tests" 300 "$BUILD/tests/cuda/test_cuda_ops"
    rc=$?
    case $rc in
    0) test_status="PASS" ;;
    77) test_status="SKIP ($(grep -m1 skip "$LOG" | cut -c1-80))" ;;
    *) test_status="FAIL rc=$rc: $(grep -E '^\[  FAILED  \] test_' "$LOG" | awk '{print $4}' | sort -u | tr '\n' ' ')" ;;
    esac
    for t in "$BUILD"/tests/cuda/test_*; do
        [ "$t" = "$BUILD/tests/cuda/test_cuda_ops" ] && continue
        [ -x "$t" ] || continue
        step "$(basename "$t")" 240 "$t"
        rc=$?
        test_status="$test_status; $(basename "$t") rc=$rc"
    done
fi

# ---- 3. op benchmark ----------------------------------------------------------------------------
BENCH_OUT=$OUTDIR/.bench_ops.txt
: > "$BENCH_OUT"
for dt in ${BENCH_DTYPES:-bf16}; do
    [ -x "$BUILD/bench/bench_gpu_ops" ] || break
    echo "== op benchmark $dt" >> "$BENCH_OUT"
    step "op benchmark $dt" 300 env MRCNN_CONV_VERBOSE=1 bash -c \
        "set -o pipefail; '$BUILD/bench/bench_gpu_ops' --dtype $dt --iters ${BENCH_ITERS:-20} | tee -a '$BENCH_OUT'"
done

# ---- 4. torchvision, same call (before ours: the budget never squeezes it out) ---------
tv_line="skipped"
if [ "${SKIP_TV:-0}" != 1 ] && [ -f bench/torchvision_bench.py ]; then
    TV_OUT=$OUTDIR/.tv.txt
    step "torchvision" 360 bash -c "set -o pipefail; python3 bench/torchvision_bench.py ${TV_ARGS:-8 800 1216 bf16} | tee '$TV_OUT'"
    rc=$?
    tv_line="rc=$rc: $(grep 'torchvision train' "$TV_OUT" | tail -1)"
fi

# ---- 5. training benchmark (issue 9), when the build has it -----------------------------------
train_line="not available in this build (no 'mrcnn bench train')"
if [ -x "$BUILD/mrcnn" ] && "$BUILD/mrcnn" bench train --help > /dev/null 2>&1; then
    TRAIN_OUT=$OUTDIR/.train.txt
    step "mrcnn bench train" 300 bash -c "set -o pipefail; '$BUILD/mrcnn' bench train ${TRAIN_ARGS:-} | tee '$TRAIN_OUT'"
    rc=$?
    train_line="rc=$rc: $(grep -i 'img/s' "$TRAIN_OUT" | tail -1)"
fi

# ---- 6. training smoke run: tiny config on a synthetic set, MODEL.DEVICE=cuda ------------------
smoke_line="not run"
if [ "${SKIP_SMOKE:-0}" != 1 ] && [ -x "$BUILD/mrcnn" ] && [ -x "$BUILD/mrcnn-prep" ]; then
    SM=$(mktemp -d)
    if step "smoke data" 120 bash -c "'$BUILD/mrcnn-prep' shapes --out '$SM/raw' --train 32 --val 4 --size 128x128 &&
        '$BUILD/mrcnn-prep' coco --annotations '$SM/raw/annotations/instances_train.json' --images '$SM/raw/train' \
        --out '$SM/shards' --name train --shards 1"; then
        step "smoke train (cuda, tiny, ${SMOKE_STEPS:-20} steps)" 180 bash -c "set -o pipefail; '$BUILD/mrcnn' train \
            --config configs/tiny.yaml --set MODEL.DEVICE=cuda --set DATASETS.TRAIN='$SM/shards/train-index.h5' \
            --set OUTPUT_DIR='$SM/out' --set LOG_PERIOD=5 --max-steps ${SMOKE_STEPS:-20} | tee '$SM/train.txt'"
        rc=$?
        smoke_line="rc=$rc: $(grep -E 'step [0-9]+/[0-9]+ +loss' "$SM/train.txt" 2>/dev/null | tail -1 |
            sed 's/^\[[^]]*\] *//; s/ loss_objectness.* lr [^ ]*//' | cut -c1-110)"
        grep -q "training on the CPU" "$LOG" && smoke_line="$smoke_line (fell back to the CPU)"
    else
        smoke_line="data preparation failed (see the log)"
    fi
    rm -rf "$SM"
fi

# ---- summary --------------------------------------------------------------------------------------------
{
    echo
    echo "==== GPU check summary: ${device:-no GPU?}, build $BUILD, $(($(date +%s) - T0))s ===="
    echo "cuda op tests : $test_status"
    [ -n "$unresolved" ] && echo "unresolved libs:$unresolved"
    echo "convolutions (fwd + bwd data + bwd filter; % of the measured cuDNN ceiling):"
    grep -E "^conv .* fwd\+bwd " "$BENCH_OUT" | awk '{
        n = index($0, " fwd+bwd"); name = substr($0, 1, n - 1);
        printf "  %-34s %-5s %9s ms %7s TFLOP/s %6s of %s\n", name, $(NF-7), $(NF-6), $(NF-4), $(NF-2), $NF }'
    echo "fused conv+bias+ReLU choices:"
    grep -E "^conv x .*-> (fused|plain)" "$LOG" | sed 's/^/  /' | sort -u
    echo "other ops:"
    grep -E "^(linear|deconv2x2|relu|add|upsample_add|maxpool|roi_align|bce_logits|softmax_ce|sgd_update|nonfinite)" "$BENCH_OUT" |
        awk '{ printf "  %s\n", $0 }' | cut -c1-110
    echo "mrcnn train   : $train_line"
    echo "smoke (cuda)  : $smoke_line"
    echo "torchvision   : $tv_line"
    mr=$(echo "$train_line" | grep -oE '[0-9.]+ img/s' | tail -1 | cut -d' ' -f1)
    tv=$(echo "$tv_line" | grep -oE '[0-9.]+ img/s' | tail -1 | cut -d' ' -f1)
    if [ -n "$mr" ] && [ -n "$tv" ]; then
        echo "ratio mrcnn / torchvision: $(awk -v a="$mr" -v b="$tv" 'BEGIN { printf "%.2f", a / b }')"
    fi
} > "$SUMMARY"
cat "$SUMMARY" >> "$LOG"
rm -f "$OUTDIR"/.bench_ops.txt "$OUTDIR"/.train.txt "$OUTDIR"/.tv.txt
cat "$SUMMARY"
case "$test_status" in PASS*) exit 0 ;; *) exit 1 ;; esac
