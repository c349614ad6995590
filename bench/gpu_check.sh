#!/usr/bin/env bash
# The GPU check: one call on the GPU host answers everything, from a build made
# elsewhere (bench/README.md). In order, each step bounded in time, the most wanted
# answers first so that a tight budget squeezes out only the last ones:
#   1. the device and the libraries the programs resolve;
#   2. the CUDA op tests (every op against the CPU backend, fp32/fp16/bf16);
#   3. torchvision's Mask R-CNN on the training benchmark's workload
#      (bench/torchvision_bench.py, TV_ARGS), then at once `mrcnn bench train` on the
#      same workload at the first precision of TRAIN_DTYPES (bf16): the two throughputs
#      are a ratio measured side by side; its 1-GPU step timeline is written to
#      $GPU_CHECK_OUT/timeline_1gpu_<dtype>.json and fed to `mrcnn bench scaling --model`;
#   4. the GPU model tests (tests/cuda/test_* beyond the op tests: the whole model's
#      losses and gradients against the CPU at fp32 and bf16, a 200-step training curve),
#      and the gradient buckets over GPU arenas (tests/mpi/prog_buckets, 1 and 2 ranks);
#   5. a training smoke run: `mrcnn train` on configs/tiny.yaml with MODEL.DEVICE=cuda for
#      SMOKE_STEPS (20) steps on a synthetic shapes set made on the spot;
#   6. `mrcnn bench train` at the other precisions of TRAIN_DTYPES (fp32), when the
#      budget allows;
#   7. the op benchmark at R50-FPN shapes (bench_gpu_ops), per dtype in BENCH_DTYPES.
# The full log goes to $GPU_CHECK_OUT/gpu_check.log (default ./gpu-check-out; give
# GPU_CHECK_OUT=$OUT on the device tool); a short table is printed last and saved as
# summary.txt beside it.
#
# env: BUILD (default: the build packed in .gpu-pack/pack.tar.xz, unpacked into
# .gpu-pack/root; else build/release), BENCH_DTYPES ("bf16"; "" skips the op
# benchmark), BENCH_ITERS (20), TRAIN_DTYPES ("bf16 fp32"), TRAIN_ARGS (more arguments
# of `mrcnn bench train`, e.g. "--device cpu --size 128x160 --batch 1" to rehearse
# without a GPU), TV_ARGS ("8 800 1216 bf16"), PYTHON (python3), SKIP_TV=1,
# SKIP_SMOKE=1, SMOKE_STEPS, SMOKE_DEVICE (cuda), GPU_CHECK_BUDGET (seconds for the
# whole script, 540).
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
    step "cuda op tests" 200 "$BUILD/tests/cuda/test_cuda_ops"
    rc=$?
    case $rc in
    0) test_status="PASS" ;;
    77) test_status="SKIP ($(grep -m1 skip "$LOG" | cut -c1-80))" ;;
    *) test_status="FAIL rc=$rc: $(grep -E '^\[  FAILED  \] test_' "$LOG" | awk '{print $4}' | sort -u | tr '\n' ' ')" ;;
    esac
fi

# ---- 3. torchvision, then our training benchmark at once (same call, same workload) -------
PY=${PYTHON:-python3}
TRAIN_DTYPES=${TRAIN_DTYPES:-bf16 fp32}
first_dt=${TRAIN_DTYPES%% *}
tv_line="skipped"
if [ "${SKIP_TV:-0}" != 1 ] && [ -f bench/torchvision_bench.py ]; then
    TV_OUT=$OUTDIR/.tv.txt
    step "torchvision" 240 bash -c "set -o pipefail; $PY bench/torchvision_bench.py ${TV_ARGS:-8 800 1216 bf16} | tee '$TV_OUT'"
    rc=$?
    tv_line="rc=$rc: $(grep 'torchvision train' "$TV_OUT" | tail -1)"
fi
have_bench_train=0
[ -x "$BUILD/mrcnn" ] && "$BUILD/mrcnn" bench train --help > /dev/null 2>&1 && have_bench_train=1
# bench_train DTYPE LIMIT: one `mrcnn bench train` run; its human line and JSON line are
# kept in $OUTDIR/bench_train_DTYPE.txt, its timeline in $OUTDIR/timeline_1gpu_DTYPE.json.
bench_train() {
    local dt=$1 limit=$2
    local out=$OUTDIR/bench_train_$dt.txt
    : > "$out"
    step "mrcnn bench train $dt" "$limit" bash -c "set -o pipefail; '$BUILD/mrcnn' bench train --precision $dt \
        --timeline '$OUTDIR/timeline_1gpu_$dt.json' ${TRAIN_ARGS:-} | tee '$out'"
}
if [ "$have_bench_train" = 1 ]; then
    bench_train "$first_dt" 240
    if [ -s "$OUTDIR/timeline_1gpu_$first_dt.json" ]; then
        step "scaling model from the $first_dt timeline" 30 bash -c "set -o pipefail; '$BUILD/mrcnn' bench scaling \
            --model '$OUTDIR/timeline_1gpu_$first_dt.json' --gpus 8,16,64 --out '$OUTDIR/scaling_model' | tee '$OUTDIR/.scaling.txt'"
    fi
fi

# ---- 4. GPU model tests and any other CUDA test programs ---------------------------------------
if [ -x "$BUILD/tests/cuda/test_cuda_ops" ]; then
    for t in "$BUILD"/tests/cuda/test_*; do
        [ "$t" = "$BUILD/tests/cuda/test_cuda_ops" ] && continue
        [ -x "$t" ] || continue
        step "$(basename "$t")" 240 env ROOT="$ROOT" "$t"
        rc=$?
        case $rc in 0) r=PASS ;; 77) r=SKIP ;; *) r="FAIL rc=$rc" ;; esac
        test_status="$test_status; $(basename "$t") $r"
    done
fi

# ---- 4b. gradient buckets over GPU arenas (tests/mpi/prog_buckets): 1 rank, and 2 ranks on the
# one GPU through MPI host staging (NCCL refuses two ranks of one communicator on one GPU) ------
if [ -x "$BUILD/tests/mpi/prog_buckets" ]; then
    MPIRUN=$(command -v mpirun || command -v orterun)
    step "gpu buckets, 1 rank" 60 env OMP_NUM_THREADS=1 "$BUILD/tests/mpi/prog_buckets" check-gpu
    rc=$?
    case $rc in 0) r=PASS ;; 77) r=SKIP ;; *) r="FAIL rc=$rc" ;; esac
    test_status="$test_status; gpu buckets 1 rank $r"
    if [ -n "$MPIRUN" ] && [ "$rc" = 0 ]; then
        step "gpu buckets, 2 ranks" 90 env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            "$MPIRUN" --oversubscribe -np 2 "$BUILD/tests/mpi/prog_buckets" check-gpu
        rc=$?
        case $rc in 0) r=PASS ;; *) r="FAIL rc=$rc" ;; esac
        test_status="$test_status; gpu buckets 2 ranks $r"
    fi
fi

# ---- 5. training smoke run: tiny config on a synthetic set, MODEL.DEVICE=cuda ------------------
smoke_line="not run"
if [ "${SKIP_SMOKE:-0}" != 1 ] && [ -x "$BUILD/mrcnn" ] && [ -x "$BUILD/mrcnn-prep" ]; then
    SM=$(mktemp -d)
    if step "smoke data" 120 bash -c "'$BUILD/mrcnn-prep' shapes --out '$SM/raw' --train 32 --val 4 --size 128x128 &&
        '$BUILD/mrcnn-prep' coco --annotations '$SM/raw/annotations/instances_train.json' --images '$SM/raw/train' \
        --out '$SM/shards' --name train --shards 1"; then
        step "smoke train (${SMOKE_DEVICE:-cuda}, tiny, ${SMOKE_STEPS:-20} steps)" 150 bash -c "set -o pipefail; '$BUILD/mrcnn' train \
            --config configs/tiny.yaml --set MODEL.DEVICE=${SMOKE_DEVICE:-cuda} --set DATASETS.TRAIN='$SM/shards/train-index.h5' \
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

# ---- 6. the training benchmark at the other precisions, as the budget allows ------------------
if [ "$have_bench_train" = 1 ]; then
    for dt in $TRAIN_DTYPES; do
        [ "$dt" = "$first_dt" ] && continue
        bench_train "$dt" 180
    done
fi

# ---- 7. op benchmark ----------------------------------------------------------------------------
BENCH_OUT=$OUTDIR/.bench_ops.txt
: > "$BENCH_OUT"
for dt in ${BENCH_DTYPES-bf16}; do
    [ -x "$BUILD/bench/bench_gpu_ops" ] || break
    echo "== op benchmark $dt" >> "$BENCH_OUT"
    step "op benchmark $dt" 150 env MRCNN_CONV_VERBOSE=1 bash -c \
        "set -o pipefail; '$BUILD/bench/bench_gpu_ops' --dtype $dt --iters ${BENCH_ITERS:-20} | tee -a '$BENCH_OUT'"
done

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
    echo "smoke (${SMOKE_DEVICE:-cuda})  : $smoke_line"
    echo "scaling model : $(grep -E '^ +(8|64) ' "$OUTDIR/.scaling.txt" 2>/dev/null | awk '{ printf "%s GPUs %s eff, ", $1, $7 }' | sed 's/, $//')"
    echo "training throughput (same call, same workload; peak: torchvision max_memory_allocated, mrcnn its allocator high-water):"
    printf "  %-18s %9s %9s %9s %s\n" what img/s ms/step "peak GiB" "loss first -> last"
    tv_rate=""
    if [ -n "${TV_OUT:-}" ] && [ -f "$TV_OUT" ]; then
        while read -r l; do
            printf "  %-18s %9s %9s %9s %s\n" "torchvision $(echo "$l" | awk '{print $3}')" \
                "$(echo "$l" | grep -oE '[0-9.]+ img/s' | cut -d' ' -f1)" "$(echo "$l" | grep -oE '[0-9.]+ ms/iter' | cut -d' ' -f1)" \
                "$(echo "$l" | grep -oE 'peak [0-9.]+' | cut -d' ' -f2)" "$(echo "$l" | sed -n 's/.*loss first \([^ ]*\) last \([^ ]*\).*/\1 -> \2/p')"
            [ -z "$tv_rate" ] && tv_rate=$(echo "$l" | grep -oE '[0-9.]+ img/s' | cut -d' ' -f1)
        done < <(grep 'torchvision train' "$TV_OUT")
    else
        echo "  torchvision: $tv_line"
    fi
    for dt in $TRAIN_DTYPES; do
        f=$OUTDIR/bench_train_$dt.txt
        j=$(grep '^{"bench": "train"' "$f" 2>/dev/null | tail -1)
        if [ -z "$j" ]; then
            echo "  mrcnn $dt: $([ "$have_bench_train" = 1 ] && echo "no result (see the log)" || echo "not in this build")"
            continue
        fi
        $PY -c 'import json, sys
j = json.loads(sys.argv[1])
print("  %-18s %9.1f %9.1f %9.2f %.3f -> %.3f%s" % ("mrcnn " + j["precision"], j["img_per_s"], j["step_ms"], j["peak_mem_mb"] / 1024,
      j["loss_first"] if isinstance(j["loss_first"], float) else float("nan"), j["loss_last"] if isinstance(j["loss_last"], float) else float("nan"),
      "" if j["finite"] else "  NOT FINITE"))' "$j"
        if [ "$dt" = "$first_dt" ] && [ -n "$tv_rate" ]; then
            mr=$($PY -c 'import json, sys; print(json.loads(sys.argv[1])["img_per_s"])' "$j")
            mr_ratio=$(awk -v a="$mr" -v b="$tv_rate" 'BEGIN { printf "%.2f", a / b }')
        fi
    done
    [ -n "${mr_ratio:-}" ] && echo "ratio mrcnn $first_dt / torchvision (first row): $mr_ratio (milestone >= 1, goal >= 2.5)"
    ls "$OUTDIR"/timeline_1gpu_*.json > /dev/null 2>&1 && echo "timelines: $(cd "$OUTDIR" && ls timeline_1gpu_*.json | tr '\n' ' ')(mrcnn bench scaling --model FILE)"
} > "$SUMMARY"
cat "$SUMMARY" >> "$LOG"
rm -f "$OUTDIR"/.bench_ops.txt "$OUTDIR"/.tv.txt "$OUTDIR"/.scaling.txt
cat "$SUMMARY"
case "$test_status" in *FAIL*) exit 1 ;; PASS*) exit 0 ;; *) exit 1 ;; esac
