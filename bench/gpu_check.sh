#!/usr/bin/env bash
# The GPU check, from a build made elsewhere (bench/README.md), in stages that each fit
# one device call; the most wanted answer (the ratio) comes first, every step has a time
# limit, and a stage's limits are checked to fit its budget before anything runs.
#
# GPU_CHECK_STAGE=1 (the default; budget GPU_CHECK_BUDGET=240 s):
#   0. the CPU features the -march=x86-64-v3 build needs (before anything else), the
#      device, the libraries the programs resolve;
#   1. torchvision's Mask R-CNN training (bench/torchvision_bench.py's train() only) on
#      TV_ARGS, then at once `mrcnn bench train` at the first precision of TRAIN_DTYPES
#      (bf16) on the same workload with cuDNN's heuristics (MRCNN_CUDNN_FIND=0: no timed
#      search) and --no-timeline: its result line comes right after its timed loop; img/s
#      of both and their ratio;
#   2. the op table (tests/*/test_op_table --backend cuda when the build has it: every
#      backend entry against the f64 reference), else tests/cuda/test_cuda_ops, with
#      MRCNN_CUDA_SYNC_CHECK=1 (a fault is reported at the kernel that caused it);
#   3. the GPU model test (tests/cuda/test_gpu_model) at GPU_MODEL_STEPS_1 (50) steps.
# GPU_CHECK_STAGE=2 (budget 360 s):
#   4. gradient buckets over GPU arenas (tests/mpi/prog_buckets check-gpu): NCCL with 1
#      rank, then 2 ranks (MPI host staging on one GPU: NCCL refuses two ranks there);
#   5. tests/train/test_step_trace: the step's calls the same every step on the device,
#      and training with CUDA graphs against direct execution;
#   6. `mrcnn bench train` at the first precision again with cudnnFind (MRCNN_CUDNN_FIND=1)
#      and the 1-GPU step timeline (timeline_1gpu_<dtype>.json), then at the other
#      precisions of TRAIN_DTYPES (fp32), and the scaling model from the timeline;
#   7. tests/cuda/test_cuda_detect with MRCNN_DET_KERNELS=sort (the default), then
#      tests/cuda/test_cuda_det_kernels (the two settings byte for byte), then
#      test_cuda_detect with MRCNN_DET_KERNELS=legacy, in one step.
# GPU_CHECK_STAGE=3 (budget 480 s): the GPU model test at GPU_MODEL_STEPS_2 (200) steps;
#   test_cuda_ops when stage 1 ran the op table instead; a `mrcnn train` smoke run
#   (configs/tiny.yaml, MODEL.DEVICE=cuda, SMOKE_STEPS (20) steps, a synthetic set made on
#   the spot), then a second one on the same set with MRCNN_ROI_BWD=gather (ROIAlign's
#   backward without atomics in real steps; SMOKE_GATHER_STEPS (10) steps, cuDNN's
#   heuristics; its loss beside the first run's at the same step; SMOKE_GATHER_STEPS=0
#   skips it); `mrcnn bench train` at the first precision with SOLVER.CUDA_GRAPH=off
#   (SKIP_NOGRAPH=1 skips it); the op benchmark (bench_gpu_ops) per dtype in BENCH_DTYPES,
#   its backwards as the model calls them (bwd relu+write) beside the former calls (bwd
#   zero+relu+add) and ROIAlign's gather row; any other tests/cuda program (20 s each, 35 s
#   for all of them).
# GPU_CHECK_STAGE=all runs the three in one call, each within its own budget.
#
# The plan: each stage's step limits, plus each step's kill grace (timeout -k 5) and a
# fixed reserve (start-up, the summary), must add up to no more than its budget; the
# script prints the sum and stops (exit 2) before running anything when they do not.
#
# GPU_CHECK_CPU=1: the CPU rehearsal of the same stage, on a machine without a GPU: the
# CPU backend in the GPU's slot (MRCNN_CUDA_OPS_SELFCHECK, MRCNN_GPU_MODEL_SELFCHECK),
# `mrcnn bench train --device cpu` at a small size, torchvision on the CPU at a small
# size (recorded as skipped when this Python has no torch), MRCNN_REQUIRE empty; the
# same limits and budget, so that its time says the stage fits; the op benchmark runs its
# conv and GEMM groups with --cpu-check (the harness and the table's rows, not timings).
#
# Test programs run with MRCNN_REQUIRE=gpu,nccl (a missing capability is a failure, not a
# skip); on a machine with a GPU an exit 77 (skip) of any test counts as a failure.
# Python (torchvision) runs without the CUDA toolkit's directories on LD_LIBRARY_PATH, so
# torch binds its own cuBLAS/cuDNN; only our programs get the toolkit's and the pack's.
# Output, at most 8 files: $GPU_CHECK_OUT/gpu_check.log (everything), summary.txt (the
# table, also printed last), timeline_1gpu_<dtype>.json, scaling_model.csv and .png.
#
# env: GPU_CHECK_STAGE (1|2|3|all), GPU_CHECK_OUT (./gpu-check-out; $OUT on the device
# tool), GPU_CHECK_BUDGET (seconds for this call; with `all`, for the three together),
# GPU_CHECK_CPU (1: the CPU rehearsal), GPU_CHECK_PLAN_ONLY (1: check the plan, run nothing), BUILD (default: the build packed in
# .gpu-pack/pack.tar.xz by bench/gpu_pack.sh, unpacked into .gpu-pack/root; else
# build/release), TV_ARGS ("8 800 1216 bf16"), PYTHON (python3), SKIP_TV=1,
# TRAIN_DTYPES ("bf16 fp32"), TRAIN_ARGS (more arguments of `mrcnn bench train`),
# GPU_MODEL_STEPS_1 (50), GPU_MODEL_STEPS_2 (200), GPU_MODEL_SEEDS (the test's default),
# SKIP_SMOKE=1, SMOKE_STEPS (20), SMOKE_GATHER_STEPS (10), SMOKE_DEVICE (cuda), BENCH_DTYPES ("bf16"; "" skips
# the op benchmark), BENCH_ITERS (20), SCALING_TIMELINE (a timeline file for the scaling
# model, e.g. stage 1's carried back), MRCNN_REQUIRE (gpu,nccl; "" to rehearse),
# GPU_CHECK_THREADS (OMP_NUM_THREADS; default nproc).
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
T0=$(date +%s)
STAGE=${GPU_CHECK_STAGE:-1}
# Each stage's budget, and the limit of each of its steps (seconds). The sum check below
# holds them together: change a limit here and the check says whether the stage still fits.
B1=240 B2=360 B3=480
KILL_GRACE=5 # timeout -k: SIGKILL this long after SIGTERM
RESERVE=15   # per stage: unpacking, nvidia-smi, ldd, the summary
L_TV=60 L_BENCH1=45 L_OPS=35 L_MODEL1=60                        # stage 1
L_BUCK1=25 L_BUCK2=35 L_TRACE=75 L_FIND=80 L_FP32=55 L_SCALING=10 L_DETECT=30 # stage 2
L_MODEL2=130 L_OPS3=40 L_SMOKE_DATA=25 L_SMOKE=50 L_SMOKE_GATHER=25 L_NOGRAPH=60 L_OPBENCH=60 # stage 3
L_OTHERS=35 L_OTHER=20 # stage 3's other tests/cuda programs: 35 s for all of them, 20 s at most each
case $STAGE in
1) BUDGET=${GPU_CHECK_BUDGET:-$B1} ;;
2) BUDGET=${GPU_CHECK_BUDGET:-$B2} ;;
3) BUDGET=${GPU_CHECK_BUDGET:-$B3} ;;
all) BUDGET=${GPU_CHECK_BUDGET:-$((B1 + B2 + B3))} ;;
*) echo "gpu_check: GPU_CHECK_STAGE=$STAGE: expected 1, 2, 3 or all" >&2; exit 2 ;;
esac
CPU_REHEARSAL=${GPU_CHECK_CPU:-0}
OUTDIR=${GPU_CHECK_OUT:-./gpu-check-out}
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
LOG=$OUTDIR/gpu_check.log
SUMMARY=$OUTDIR/summary.txt
: > "$LOG"
: > "$SUMMARY"
TMPD=$(mktemp -d)
trap 'rm -rf "$TMPD"' EXIT
say() { echo "$*" | tee -a "$LOG"; }

# ---- 0a. CPU features, first: the release build is -march=x86-64-v3 and dies of SIGILL without them
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
missing_flags=""
for f in avx avx2 fma bmi1 bmi2 f16c movbe; do
    case $cpu_flags in *" $f "*) ;; *) missing_flags="$missing_flags $f" ;; esac
done
if [ -n "$missing_flags" ]; then
    say "gpu_check: STOP: this CPU lacks$missing_flags (from /proc/cpuinfo), which the -march=x86-64-v3"
    say "gpu_check: build needs: its programs would die of an illegal instruction. Build for this host"
    say "gpu_check: without -march=x86-64-v3 (e.g. make MODE=debug, or edit OPT in the Makefile) and repack."
    cp "$LOG" "$SUMMARY"
    exit 3
fi

# ---- 0b. the build: the carried pack (bench/gpu_pack.sh), unpacked beside the tree, else $BUILD
ORIG_LD=${LD_LIBRARY_PATH:-}
# Python's library path: the caller's, less any CUDA toolkit directory.
PY_LD=$(printf '%s' "$ORIG_LD" | tr ':' '\n' | grep -v -E '^$|/usr/local/cuda|/cuda-[0-9.]+/|/targets/x86_64-linux' | paste -sd: -)
LIBDIR="" MPIDIR=.mpi
if [ -z "${BUILD:-}" ] && [ -f .gpu-pack/pack.tar.xz ]; then
    t=$(date +%s)
    rm -rf .gpu-pack/root && mkdir -p .gpu-pack/root
    tar -xJf .gpu-pack/pack.tar.xz -C .gpu-pack/root || { say "gpu_check: cannot unpack .gpu-pack/pack.tar.xz"; exit 1; }
    BUILD=.gpu-pack/root/$(cat .gpu-pack/root/BUILD)
    LIBDIR=$ROOT/.gpu-pack/root/lib
    MPIDIR=.gpu-pack/root/.mpi
    say "gpu_check: unpacked .gpu-pack/pack.tar.xz in $(($(date +%s) - t))s"
fi
BUILD=${BUILD:-build/release}
[ -f "$MPIDIR/env.sh" ] && source "$MPIDIR/env.sh"
# Our programs: the build, the packed libraries, the CUDA toolkit's, the MPI bundle's.
case $BUILD in /*) BUILD_ABS=$BUILD ;; *) BUILD_ABS=$ROOT/$BUILD ;; esac
export LD_LIBRARY_PATH=$BUILD_ABS${LIBDIR:+:$LIBDIR}:/usr/local/cuda/lib64:/usr/local/cuda-13.0/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Python: without them (torch ships and must bind its own cuBLAS and cuDNN): "${PY_ENV[@]}" python3 ...
if [ -n "$PY_LD" ]; then PY_ENV=(env LD_LIBRARY_PATH="$PY_LD"); else PY_ENV=(env -u LD_LIBRARY_PATH); fi
export OMP_NUM_THREADS=${GPU_CHECK_THREADS:-$(nproc)}
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
TRAIN_DTYPES=${TRAIN_DTYPES:-bf16 fp32}
first_dt=${TRAIN_DTYPES%% *}

# ---- 0c. the plan: every stage's limits must fit its budget ---------------------------------------
# Steps that may not run (a program missing from the build) count all the same: an upper bound.
# Stage 3's other test programs, however many, share one allowance (L_OTHERS): one step here.
plan_check() { # plan_check STAGE BUDGET LIMIT...
    local stage=$1 budget=$2 sum=0 n=0 l
    shift 2
    for l in "$@"; do sum=$((sum + l)); n=$((n + 1)); done
    local need=$((sum + n * KILL_GRACE + RESERVE))
    echo "gpu_check: stage $stage plan: $n steps, limits ${sum}s + $n x ${KILL_GRACE}s kill grace + ${RESERVE}s reserve = ${need}s of ${budget}s"
    [ "$need" -le "$budget" ] && return 0
    echo "gpu_check: STOP: stage $stage's step limits need ${need}s, more than its ${budget}s budget (edit the L_* limits)"
    return 1
}
plan_ok=1
case $STAGE in 1 | all) plan_check 1 "$([ "$STAGE" = all ] && echo $B1 || echo "$BUDGET")" $L_TV $L_BENCH1 $L_OPS $L_MODEL1 >> "$TMPD/plan.txt" || plan_ok=0 ;; esac
case $STAGE in 2 | all) plan_check 2 "$([ "$STAGE" = all ] && echo $B2 || echo "$BUDGET")" $L_BUCK1 $L_BUCK2 $L_TRACE $L_FIND $L_FP32 $L_SCALING $L_DETECT >> "$TMPD/plan.txt" || plan_ok=0 ;; esac
case $STAGE in 3 | all) plan_check 3 "$([ "$STAGE" = all ] && echo $B3 || echo "$BUDGET")" $L_MODEL2 $L_OPS3 $L_SMOKE_DATA $L_SMOKE $L_SMOKE_GATHER $L_NOGRAPH $L_OPBENCH $L_OTHERS >> "$TMPD/plan.txt" || plan_ok=0 ;; esac
cat "$TMPD/plan.txt" >> "$LOG"
cat "$TMPD/plan.txt"
if [ "$plan_ok" != 1 ]; then
    cp "$LOG" "$SUMMARY"
    exit 2
fi
[ "${GPU_CHECK_PLAN_ONLY:-0}" = 1 ] && exit 0 # the plan alone (tests/cuda/test_gpu_check_plan.sh)

GPU_PRESENT=0
if [ -e /dev/nvidia0 ] || [ -n "$(ls -A /proc/driver/nvidia/gpus 2>/dev/null)" ]; then GPU_PRESENT=1; fi
[ "${GPU_CHECK_ASSUME_GPU:-0}" = 1 ] && GPU_PRESENT=1 # to rehearse the GPU host's verdicts
if [ "$CPU_REHEARSAL" = 1 ]; then
    # the same stage on the CPU backend, small: what fits here fits there (same limits)
    export MRCNN_CUDA_OPS_SELFCHECK=1 MRCNN_GPU_MODEL_SELFCHECK=1
    export MRCNN_REQUIRE=${MRCNN_REQUIRE-}
    TRAIN_ARGS=${TRAIN_ARGS:---device cpu --size 64x64 --batch 1 --objects 2 --steps 2 --warmup 1 --set MODEL.RPN.POST_NMS_TOPK_TRAIN=200 --set MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE=64}
    TV_ARGS=${TV_ARGS:-1 128 160 fp32}
    GPU_MODEL_STEPS_1=${GPU_MODEL_STEPS_1:-10}
    GPU_MODEL_SEEDS=${GPU_MODEL_SEEDS:-2}
    SMOKE_DEVICE=${SMOKE_DEVICE:-cpu}
    GPU_PRESENT=0
elif [ "$GPU_PRESENT" = 1 ]; then
    # The self-check modes put the CPU backend in the GPU's slot: a rehearsal, never on a GPU.
    for v in MRCNN_CUDA_OPS_SELFCHECK MRCNN_GPU_MODEL_SELFCHECK; do
        [ -n "${!v:-}" ] && { say "gpu_check: a GPU is present: ignoring $v=${!v}"; unset "$v"; }
    done
fi
export MRCNN_REQUIRE=${MRCNN_REQUIRE-gpu,nccl}
say "gpu_check: stage $STAGE, budget ${BUDGET}s, $(date -u '+%F %T') UTC, build $BUILD, $OMP_NUM_THREADS threads, GPU present: $GPU_PRESENT, CPU rehearsal: $CPU_REHEARSAL, MRCNN_REQUIRE=$MRCNN_REQUIRE, log $LOG"

# ---- time: each stage has a deadline; a step's limit is cut to what is left of it --------
DEADLINE=$((T0 + BUDGET))
STAGE_START=$T0
set_stage_deadline() { # set_stage_deadline N: under `all`, stage N gets its own budget from now
    STAGE_START=$(date +%s)
    if [ "$STAGE" = all ]; then
        local b=$B1
        [ "$1" = 2 ] && b=$B2
        [ "$1" = 3 ] && b=$B3
        [ "$1" = 1 ] && STAGE_START=$T0 # stage 1's reserve covers the start-up
        DEADLINE=$((STAGE_START + b))
        [ "$DEADLINE" -gt $((T0 + BUDGET)) ] && DEADLINE=$((T0 + BUDGET))
    else
        STAGE_START=$T0
        DEADLINE=$((T0 + BUDGET))
    fi
}
left() { echo $((DEADLINE - $(date +%s))); }
STEPS_TABLE=$TMPD/steps.txt
: > "$STEPS_TABLE"
STEP_OUT=$TMPD/step.out
# step NAME LIMIT CMD...: runs CMD with a time limit (cut to the stage's budget, less the
# kill grace), output to the log and to $STEP_OUT; returns its status.
step() {
    local name=$1 limit=$2
    shift 2
    local l
    l=$(($(left) - KILL_GRACE - 2))
    [ "$l" -lt "$limit" ] && limit=$l
    : > "$STEP_OUT"
    if [ "$limit" -lt 10 ]; then
        say "== $name: skipped, $(left)s of the stage's budget left"
        printf '%-44s %-9s %5s\n' "$name" "skipped" "-" >> "$STEPS_TABLE"
        return 124
    fi
    say "== $name (limit ${limit}s): $*"
    local t rc
    t=$(date +%s)
    timeout -k $KILL_GRACE "$limit" "$@" 2>&1 | tee "$STEP_OUT" >> "$LOG"
    rc=${PIPESTATUS[0]}
    local dt=$(($(date +%s) - t)) note=""
    case $rc in 124 | 137) note=" (time limit)" ;; esac
    say "== $name: rc=$rc in ${dt}s$note"
    printf '%-44s %-9s %5s\n' "$name" "rc=$rc" "${dt}s" >> "$STEPS_TABLE"
    return $rc
}
# A test's result from its exit status; on a machine with a GPU a skip (77) is a failure.
verdict() {
    local rc=$1 why
    why=$(grep -m1 -E '^(skip|FAIL) \[' "$STEP_OUT" | cut -c1-110)
    case $rc in
    0) echo "PASS" ;;
    77) if [ "$GPU_PRESENT" = 1 ]; then echo "FAIL (skipped on a machine with a GPU: $why)"; else echo "SKIP ($why)"; fi ;;
    124 | 137) echo "FAIL (time limit)" ;;
    *)
        local failed
        failed=$(grep -E '^\[  FAILED  \] test_' "$STEP_OUT" | awk '{print $4}' | sort -u | tr '\n' ' ')
        echo "FAIL rc=$rc${failed:+: $failed}${why:+ $why}"
        ;;
    esac
}
RESULTS=$TMPD/results.txt
: > "$RESULTS"
result() { printf '%-26s: %s\n' "$1" "$2" >> "$RESULTS"; }

# The last logged step of a `mrcnn train` run: step, total loss, the rest up to the lr.
smoke_loss_line() {
    grep -E 'step [0-9]+/[0-9]+ +loss' "$1" | tail -1 | sed 's/^\[[^]]*\] *//; s/ loss_objectness.* lr [^ ]*//' | cut -c1-100
}

# ---- device and libraries (every stage) -----------------------------------------------------------
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 || echo "nvidia-smi failed"; } >> "$LOG"
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
[ "$CPU_REHEARSAL" = 1 ] && device="CPU rehearsal (no GPU)"
unresolved=""
for f in "$BUILD/tests/cuda/test_cuda_ops" "$BUILD/bench/bench_gpu_ops" "$BUILD/mrcnn"; do
    [ -x "$f" ] || { say "missing program: $f"; continue; }
    nf=$(ldd "$f" | grep "not found")
    [ -n "$nf" ] && unresolved="$unresolved $(basename "$f"): $nf;"
done
[ -f "$BUILD/libmrcnn_cuda.so" ] && ldd "$BUILD/libmrcnn_cuda.so" >> "$LOG" 2>&1
[ -n "$unresolved" ] && say "unresolved libraries:$unresolved"
have_bench_train=0
[ -x "$BUILD/mrcnn" ] && "$BUILD/mrcnn" bench train --help > /dev/null 2>&1 && have_bench_train=1
# the op table (another program of the test suites; its absence falls back to test_cuda_ops)
OP_TABLE=""
for f in "$BUILD"/tests/*/test_op_table "$BUILD"/tests/*/test_op_table_*; do
    [ -x "$f" ] && { OP_TABLE=$f; break; }
done

# bench_train DTYPE LIMIT FIND TAG [ARGS...]: one `mrcnn bench train` run, cuDNN's timed
# search on (FIND 1) or its heuristics (0); the human and JSON lines go to
# $TMPD/bench_train_TAG.txt (and the log); ARGS are more arguments of bench train.
bench_train() {
    local dt=$1 limit=$2 find=$3 tag=$4
    shift 4
    local out=$TMPD/bench_train_$tag.txt
    : > "$out"
    step "mrcnn bench train $tag" "$limit" env MRCNN_CUDNN_FIND=$find bash -c "set -o pipefail; '$BUILD/mrcnn' bench train \
        --precision $dt ${TRAIN_ARGS:-} $* | tee '$out'"
}
# gpu_model_test STEPS LIMIT
gpu_model_test() {
    local n=$1 limit=$2
    [ -x "$BUILD/tests/cuda/test_gpu_model" ] || { result "gpu model test ($n steps)" "FAIL (not in this build)"; return; }
    step "test_gpu_model ($n steps)" "$limit" env ROOT="$ROOT" MRCNN_GPU_MODEL_STEPS="$n" \
        ${GPU_MODEL_SEEDS:+MRCNN_GPU_MODEL_SEEDS=$GPU_MODEL_SEEDS} "$BUILD/tests/cuda/test_gpu_model"
    result "gpu model test ($n steps)" "$(verdict $?)"
}
# cuda_ops LIMIT: test_cuda_ops (every op of the CUDA backend against the CPU backend)
cuda_ops() {
    if [ ! -x "$BUILD/tests/cuda/test_cuda_ops" ]; then
        result "test_cuda_ops" "FAIL (not in this build)"
        return
    fi
    step "test_cuda_ops" "$1" env MRCNN_CUDA_SYNC_CHECK=1 MRCNN_CONV_VERBOSE=1 "$BUILD/tests/cuda/test_cuda_ops"
    local r
    r=$(verdict $?)
    local n fma other
    n=$(grep -c "max rel err" "$STEP_OUT")
    fma=$(grep -E "^conv algo .* fp32: .* math fma" "$STEP_OUT" | sort -u | wc -l)
    other=$(grep -E "^conv algo .* fp32: " "$STEP_OUT" | grep -v " math fma" | sort -u | wc -l)
    [ "$n" -gt 0 ] && r="$r ($n comparisons; cuDNN fp32 choices: $fma FMA-math, $other other)"
    result "test_cuda_ops" "$r"
}

TV_OUT=$TMPD/tv.txt
: > "$TV_OUT"
tv_line="not run"
BENCH_OUT=$TMPD/bench_ops.txt
: > "$BENCH_OUT"
smoke_line=""
smoke_gather_line=""
scaling_line=""

# =================================== stage 1 ===========================================================
if [ "$STAGE" = 1 ] || [ "$STAGE" = all ]; then
    set_stage_deadline 1
    # ---- 1. torchvision's training, then ours at once (same call, same workload): the ratio first
    if [ "${SKIP_TV:-0}" != 1 ] && [ -f bench/torchvision_bench.py ] && [ "$CPU_REHEARSAL" = 1 ] &&
        ! "${PY_ENV[@]}" "$PY" -c "import torch, torchvision" > /dev/null 2>&1; then
        tv_line="skipped (CPU rehearsal: $PY has no torch/torchvision)"
    elif [ "${SKIP_TV:-0}" != 1 ] && [ -f bench/torchvision_bench.py ]; then
        cat > "$TMPD/tv_train.py" <<'PY'
# bench/torchvision_bench.py's training benchmark alone (its __main__ also times inference).
import os, sys
sys.path.insert(0, os.path.join(os.environ["GPU_CHECK_ROOT"], "bench"))
import torch, torchvision
import torchvision_bench as tb
print(torch.__version__, torchvision.__version__, tb.dev, torch.cuda.get_device_name() if tb.dev == "cuda" else "", flush=True)
torch.backends.cudnn.benchmark = tb.dev == "cuda"
a = sys.argv[1:]
for k in range(0, len(a), 4):
    bs, H, W, mode = int(a[k]), int(a[k + 1]), int(a[k + 2]), a[k + 3]
    tb.train(bs, H, W, mode, 4 if tb.dev == "cuda" else 1, 10 if tb.dev == "cuda" else 2)
PY
        step "torchvision train" $L_TV "${PY_ENV[@]}" GPU_CHECK_ROOT="$ROOT" "$PY" "$TMPD/tv_train.py" ${TV_ARGS:-8 800 1216 bf16}
        rc=$?
        cp "$STEP_OUT" "$TV_OUT"
        tv_line="rc=$rc, no result line: $(grep -E 'Error|error' "$TV_OUT" | tail -1 | cut -c1-100)"
    else
        tv_line="skipped"
    fi
    # cuDNN's heuristics (no timed search on this first call) and no timeline: the result
    # line comes right after the timed loop
    [ "$have_bench_train" = 1 ] && bench_train "$first_dt" $L_BENCH1 0 "$first_dt" --no-timeline

    # ---- 2. the op table (else the CUDA op tests)
    if [ -n "$OP_TABLE" ]; then
        # the CUDA backend against the f64 reference; the rehearsal: the CPU backend
        ob=cuda
        [ "$CPU_REHEARSAL" = 1 ] && ob=cpu
        step "op table ($ob)" $L_OPS env ROOT="$ROOT" MRCNN_CUDA_SYNC_CHECK=1 "$OP_TABLE" --backend $ob
        rc=$?
        r=$(verdict $rc)
        sm=$(grep -m1 '^summary: ' "$STEP_OUT" | sed 's/^summary: //')
        [ -n "$sm" ] && r="$r ($sm; $(grep -c ' not run: ' "$STEP_OUT") rows not run)"
        result "op table ($ob)" "$r"
    else
        say "gpu_check: no op table program in $BUILD/tests (test_op_table): test_cuda_ops instead"
        cuda_ops $L_OPS
    fi

    # ---- 3. the GPU model test, short
    gpu_model_test "${GPU_MODEL_STEPS_1:-50}" $L_MODEL1
fi

# =================================== stage 2 ===========================================================
if [ "$STAGE" = 2 ] || [ "$STAGE" = all ]; then
    set_stage_deadline 2
    # ---- 4. gradient buckets over GPU arenas: NCCL with 1 rank, then 2 ranks on the one GPU
    # through MPI host staging (NCCL refuses two ranks of one communicator on one GPU)
    if [ -x "$BUILD/tests/mpi/prog_buckets" ]; then
        MPIRUN=$(command -v mpirun || command -v orterun)
        step "gpu buckets, 1 rank (NCCL)" $L_BUCK1 env OMP_NUM_THREADS=1 "$BUILD/tests/mpi/prog_buckets" check-gpu
        rc=$?
        result "gpu buckets, 1 rank" "$(verdict $rc)"
        if [ -n "$MPIRUN" ] && [ "$rc" = 0 ]; then
            step "gpu buckets, 2 ranks" $L_BUCK2 env OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
                "$MPIRUN" --oversubscribe -np 2 "$BUILD/tests/mpi/prog_buckets" check-gpu
            result "gpu buckets, 2 ranks" "$(verdict $?)"
        fi
    else
        result "gpu buckets" "FAIL (tests/mpi/prog_buckets not in this build)"
    fi
    # ---- 5. the step's replayability on the device and CUDA graphs against direct execution
    if [ -x "$BUILD/tests/train/test_step_trace" ]; then
        step "step trace + CUDA graphs" $L_TRACE env ROOT="$ROOT" MRCNN_CUDA_SYNC_CHECK=0 \
            $([ "$CPU_REHEARSAL" = 1 ] && echo MRCNN_GRAPH_TEST_CPU=1) "$BUILD/tests/train/test_step_trace"
        rc=$?
        r=$(verdict $rc)
        [ "$GPU_PRESENT" = 1 ] && grep -q "SKIPPED \] test_graph_vs_direct" "$STEP_OUT" && r="FAIL (the CUDA cases skipped)"
        r="$r $(grep -E "^(fp32|bf16): weights max" "$STEP_OUT" | sed 's/ (max .*//' | tr '\n' ' ')"
        result "step trace + CUDA graphs" "$r"
    else
        result "step trace + CUDA graphs" "FAIL (not in this build)"
    fi
    # ---- 6. bench train with cudnnFind and the timeline, the other precisions, the scaling model
    if [ "$have_bench_train" = 1 ]; then
        bench_train "$first_dt" $L_FIND 1 "$first_dt-find" --timeline "'$OUTDIR/timeline_1gpu_$first_dt.json'"
        for dt in $TRAIN_DTYPES; do
            [ "$dt" = "$first_dt" ] && continue
            bench_train "$dt" $L_FP32 0 "$dt" --no-timeline
        done
        tl=${SCALING_TIMELINE:-$OUTDIR/timeline_1gpu_$first_dt.json}
        if [ -s "$tl" ]; then
            step "scaling model from $(basename "$tl")" $L_SCALING "$BUILD/mrcnn" bench scaling --model "$tl" --gpus 8,16,64 \
                --out "$TMPD/scaling_model"
            cp "$STEP_OUT" "$TMPD/scaling.txt"
            for f in scaling_model.csv scaling_model.png; do
                [ -f "$TMPD/scaling_model/$f" ] && cp "$TMPD/scaling_model/$f" "$OUTDIR/$f"
            done
            scaling_line="$(grep -E '^ +(8|64) ' "$TMPD/scaling.txt" | awk '{ printf "%s GPUs %s eff, ", $1, $7 }' | sed 's/, $//') ($(basename "$tl"))"
        fi
    fi
    # ---- 7. the detection ops, with each MRCNN_DET_KERNELS setting against the host (the
    # batch sort, the default, and the legacy block-per-segment kernels), then the two
    # against each other byte for byte: three runs in one step (one limit, one kill grace)
    if [ -x "$BUILD/tests/cuda/test_cuda_detect" ]; then
        # the legacy run last: past GPU checks covered it, so it is the one a time limit may cut
        det_runs='MRCNN_DET_KERNELS=sort "$0/tests/cuda/test_cuda_detect"; echo "== det run sort rc=$?"
            if [ -x "$0/tests/cuda/test_cuda_det_kernels" ]; then "$0/tests/cuda/test_cuda_det_kernels"; echo "== det run same rc=$?"; fi
            MRCNN_DET_KERNELS=legacy "$0/tests/cuda/test_cuda_detect"; echo "== det run legacy rc=$?"'
        step "test_cuda_detect (sort, legacy, same)" $L_DETECT env MRCNN_CUDA_SYNC_CHECK=1 bash -c "$det_runs" "$BUILD"
        rc=$?
        det_out=$TMPD/det_runs.txt
        cp "$STEP_OUT" "$det_out"
        for k in sort same legacy; do
            r=$(grep -m1 "^== det run $k rc=" "$det_out" | sed 's/.*rc=//')
            name="test_cuda_detect ($k)"
            [ "$k" = same ] && name="test_cuda_det_kernels"
            if [ -z "$r" ]; then
                if [ "$k" = same ] && [ ! -x "$BUILD/tests/cuda/test_cuda_det_kernels" ]; then
                    result "$name" "FAIL (not in this build)"
                else
                    result "$name" "FAIL (not reached: $(verdict $rc))"
                fi
                continue
            fi
            # the run's own output, for verdict's skip/failure lines
            awk -v k="$k" '/^== det run / { if ($4 == k) { printf "%s", buf; exit } buf = ""; next } { buf = buf $0 "\n" }' \
                "$det_out" > "$STEP_OUT"
            result "$name" "$(verdict "$r")"
        done
    else
        result "test_cuda_detect" "FAIL (not in this build)"
    fi
fi

# =================================== stage 3 ===========================================================
if [ "$STAGE" = 3 ] || [ "$STAGE" = all ]; then
    set_stage_deadline 3
    gpu_model_test "${GPU_MODEL_STEPS_2:-200}" $L_MODEL2
    [ -n "$OP_TABLE" ] && cuda_ops $L_OPS3

    # training smoke run: tiny config on a synthetic set, MODEL.DEVICE=cuda
    if [ "${SKIP_SMOKE:-0}" != 1 ] && [ -x "$BUILD/mrcnn" ] && [ -x "$BUILD/mrcnn-prep" ]; then
        SM=$TMPD/smoke
        mkdir -p "$SM"
        if step "smoke data" $L_SMOKE_DATA bash -c "'$BUILD/mrcnn-prep' shapes --out '$SM/raw' --train 32 --val 4 --size 128x128 &&
            '$BUILD/mrcnn-prep' coco --annotations '$SM/raw/annotations/instances_train.json' --images '$SM/raw/train' \
            --out '$SM/shards' --name train --shards 1"; then
            step "smoke train (${SMOKE_DEVICE:-cuda}, tiny, ${SMOKE_STEPS:-20} steps)" $L_SMOKE bash -c "set -o pipefail; '$BUILD/mrcnn' train \
                --config configs/tiny.yaml --set MODEL.DEVICE=${SMOKE_DEVICE:-cuda} --set DATASETS.TRAIN='$SM/shards/train-index.h5' \
                --set OUTPUT_DIR='$SM/out' --set LOG_PERIOD=5 --max-steps ${SMOKE_STEPS:-20}"
            rc=$?
            smoke_line="rc=$rc: $(smoke_loss_line "$STEP_OUT")"
            grep -q "training on the CPU" "$STEP_OUT" && smoke_line="$smoke_line (fell back to the CPU)"
            cp "$STEP_OUT" "$SM/smoke.txt"
            # ROIAlign's backward by gather (no atomics) in real steps on the same set; cuDNN's
            # heuristics (the first run timed its search); its loss beside the first run's
            gs=${SMOKE_GATHER_STEPS:-10}
            if [ "$gs" -gt 0 ]; then
                step "smoke train gather (${SMOKE_DEVICE:-cuda}, tiny, $gs steps)" $L_SMOKE_GATHER env MRCNN_ROI_BWD=gather \
                    MRCNN_CUDNN_FIND=0 bash -c "set -o pipefail; '$BUILD/mrcnn' train \
                    --config configs/tiny.yaml --set MODEL.DEVICE=${SMOKE_DEVICE:-cuda} --set DATASETS.TRAIN='$SM/shards/train-index.h5' \
                    --set OUTPUT_DIR='$SM/out-gather' --set LOG_PERIOD=5 --max-steps $gs"
                rc=$?
                smoke_gather_line="rc=$rc: $(smoke_loss_line "$STEP_OUT")"
                gk=$(grep -E 'step [0-9]+/[0-9]+ +loss' "$STEP_OUT" | tail -1 | grep -oE 'step [0-9]+/' | tr -d /)
                if [ -n "$gk" ]; then
                    fl=$(grep -E "$gk/[0-9]+ +loss" "$SM/smoke.txt" | tail -1 | grep -oE ' loss [^ ]+' | sed 's/^ //')
                    smoke_gather_line="$smoke_gather_line (first run at $gk: ${fl:-none logged})"
                fi
                grep -q "training on the CPU" "$STEP_OUT" && smoke_gather_line="$smoke_gather_line (fell back to the CPU)"
            fi
        else
            smoke_line="data preparation failed (see the log)"
        fi
        rm -rf "$SM"
    fi
    # the first precision without CUDA graphs: what the replayed step gains
    [ "${SKIP_NOGRAPH:-0}" = 1 ] || [ "$have_bench_train" != 1 ] ||
        bench_train "$first_dt" $L_NOGRAPH 0 "$first_dt-nograph" --no-timeline --set SOLVER.CUDA_GRAPH=off

    # op benchmark
    for dt in ${BENCH_DTYPES-bf16}; do
        [ -x "$BUILD/bench/bench_gpu_ops" ] || break
        echo "== op benchmark $dt" >> "$BENCH_OUT"
        if [ "$CPU_REHEARSAL" = 1 ]; then
            # the harness on the CPU backend at shapes / 8 (not timings): the conv and GEMM
            # groups, whose backward rows the table below picks out
            step "op benchmark $dt" $L_OPBENCH bash -c "'$BUILD/bench/bench_gpu_ops' --cpu-check --only conv &&
                '$BUILD/bench/bench_gpu_ops' --cpu-check --only gemm"
        else
            step "op benchmark $dt" $L_OPBENCH env MRCNN_CONV_VERBOSE=1 "$BUILD/bench/bench_gpu_ops" --dtype $dt --iters ${BENCH_ITERS:-20}
        fi
        rc=$?
        cat "$STEP_OUT" >> "$BENCH_OUT"
        result "op benchmark $dt" "$(verdict $rc)"
        break # one dtype fits the plan
    done
    # any CUDA test program this script does not know by name, within one allowance
    others_end=$(($(date +%s) + L_OTHERS))
    for t in "$BUILD"/tests/cuda/test_*; do
        case $(basename "$t") in test_cuda_ops | test_cuda_detect | test_cuda_det_kernels | test_gpu_model) continue ;; esac
        [ -x "$t" ] || continue
        lim=$((others_end - $(date +%s)))
        [ "$lim" -gt "$L_OTHER" ] && lim=$L_OTHER
        step "$(basename "$t")" "$lim" env ROOT="$ROOT" "$t"
        result "$(basename "$t")" "$(verdict $?)"
    done
fi

# ---- summary ------------------------------------------------------------------------------------------
{
    echo
    echo "==== GPU check, stage $STAGE: ${device:-no GPU?}, build $BUILD, $(($(date +%s) - T0))s of ${BUDGET}s ===="
    echo "cpu features              : avx avx2 fma bmi1 bmi2 f16c movbe present"
    [ -n "$unresolved" ] && echo "unresolved libs           :$unresolved"
    cat "$RESULTS"
    if [ "$STAGE" = 1 ] || [ "$STAGE" = all ] || [ -n "$(ls "$TMPD"/bench_train_*.txt 2>/dev/null)" ]; then
        echo "training throughput (same call, same workload; peak: torchvision max_memory_allocated, mrcnn its allocator high-water):"
        printf "  %-18s %9s %9s %9s %s\n" what img/s ms/step "peak GiB" "loss first -> last"
        tv_rate=""
        if grep -q 'torchvision train' "$TV_OUT"; then
            while read -r l; do
                printf "  %-18s %9s %9s %9s %s\n" "torchvision $(echo "$l" | awk '{print $3}')" \
                    "$(echo "$l" | grep -oE '[0-9.]+ img/s' | cut -d' ' -f1)" "$(echo "$l" | grep -oE '[0-9.]+ ms/iter' | cut -d' ' -f1)" \
                    "$(echo "$l" | grep -oE 'peak [0-9.]+' | cut -d' ' -f2)" "$(echo "$l" | sed -n 's/.*loss first \([^ ]*\) last \([^ ]*\).*/\1 -> \2/p')"
                [ -z "$tv_rate" ] && tv_rate=$(echo "$l" | grep -oE '[0-9.]+ img/s' | cut -d' ' -f1)
            done < <(grep 'torchvision train' "$TV_OUT")
        elif [ "$tv_line" != "not run" ]; then
            echo "  torchvision: $tv_line"
        fi
        for dt in $TRAIN_DTYPES "$first_dt-find" "$first_dt-nograph"; do
            f=$TMPD/bench_train_$dt.txt
            [ -f "$f" ] || continue
            j=$(grep '^{"bench": "train"' "$f" 2>/dev/null | tail -1)
            if [ -z "$j" ]; then
                echo "  mrcnn $dt: no result (see the log)"
                continue
            fi
            "${PY_ENV[@]}" python3 -c 'import json, sys
j = json.loads(sys.argv[1])
f = lambda v: v if isinstance(v, float) else float("nan")
print("  %-18s %9.1f %9.1f %9.2f %.3f -> %.3f%s  (syncs/step %s, reads %s, uploads %s, graphs %s)" % ("mrcnn " + sys.argv[2],
      j["img_per_s"], j["step_ms"], j["peak_mem_mb"] / 1024, f(j["loss_first"]), f(j["loss_last"]),
      "" if j["finite"] else "  NOT FINITE", j.get("syncs_per_step", "?"), j.get("reads_per_step", "?"),
      j.get("uploads_per_step", "?"), j.get("cuda_graph", "?")))' "$j" "$dt"
            if [ "$dt" = "$first_dt" ] && [ -n "$tv_rate" ]; then
                mr=$("${PY_ENV[@]}" python3 -c 'import json, sys; print(json.loads(sys.argv[1])["img_per_s"])' "$j")
                echo "  ratio mrcnn $first_dt / torchvision (first row): $(awk -v a="$mr" -v b="$tv_rate" 'BEGIN { printf "%.2f", a / b }') (milestone >= 1, goal >= 2.5)"
            fi
        done
        [ "$have_bench_train" = 1 ] || echo "  mrcnn: no \`mrcnn bench train\` in this build"
    fi
    [ -n "$smoke_line" ] && echo "smoke (${SMOKE_DEVICE:-cuda})              : $smoke_line"
    [ -n "$smoke_gather_line" ] && echo "smoke roi gather (${SMOKE_DEVICE:-cuda})   : $smoke_gather_line"
    [ -n "$scaling_line" ] && echo "scaling model             : $scaling_line"
    if grep -qE "^(conv|linear|deconv2x2|relu|add|upsample_add|maxpool|roi_align|bce_logits|softmax_ce|sgd_update|nonfinite)" "$BENCH_OUT"; then
        echo "convolutions (fwd + bwd data + bwd filter; % of the measured cuDNN ceiling):"
        grep -E "^conv .* fwd\+bwd " "$BENCH_OUT" | awk '{
            n = index($0, " fwd+bwd"); name = substr($0, 1, n - 1);
            printf "  %-34s %-5s %9s ms %7s TFLOP/s %6s of %s\n", name, $(NF-7), $(NF-6), $(NF-4), $(NF-2), $NF }'
        echo "conv backwards as the model calls them (bwd relu+write: ReLU and db fused, dx written, fp32 dw, db) and as before (zero+relu+add):"
        grep -E "^conv .* bwd (relu\+write|zero\+relu\+add)" "$BENCH_OUT" | awk '{ printf "  %s\n", $0 }' | cut -c1-120
        echo "fused conv+bias+ReLU choices:"
        grep -E "^conv x .*-> (fused|plain)" "$BENCH_OUT" | sed 's/^/  /' | sort -u
        echo "other ops:"
        grep -E "^(linear|deconv2x2|relu|add|upsample_add|maxpool|roi_align|bce_logits|softmax_ce|sgd_update|nonfinite)" "$BENCH_OUT" |
            awk '{ printf "  %s\n", $0 }' | cut -c1-120
    fi
    ls "$OUTDIR"/timeline_1gpu_*.json > /dev/null 2>&1 && echo "timelines: $(cd "$OUTDIR" && ls timeline_1gpu_*.json | tr '\n' ' ')(mrcnn bench scaling --model FILE)"
    echo "steps (name, exit status, seconds):"
    sed 's/^/  /' "$STEPS_TABLE"
    sed 's/^gpu_check: /  /' "$TMPD/plan.txt"
} > "$SUMMARY"
cat "$SUMMARY" >> "$LOG"

# ---- at most 8 files come back: fold any others into the log (text) or drop them -----------------------
n=$(find "$OUTDIR" -type f | wc -l)
if [ "$n" -gt 8 ]; then
    find "$OUTDIR" -type f ! -name gpu_check.log ! -name summary.txt | sort | tail -n +7 | while read -r f; do
        if grep -Iq . "$f" 2>/dev/null; then { echo "==== folded in: ${f#$OUTDIR/}"; cat "$f"; } >> "$LOG"; fi
        rm -f "$f"
    done
    find "$OUTDIR" -mindepth 1 -type d -empty -delete
fi
cat "$SUMMARY"
grep -q "FAIL" "$RESULTS" && exit 1
exit 0
