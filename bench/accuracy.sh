#!/usr/bin/env bash
# Trains as well as torchvision?
#
# Trains mrcnn and torchvision's Mask R-CNN on the same synthetic COCO-format set, from
# the same initial weights, with the same schedule, and scores both result files with
# the same evaluator (`mrcnn eval --gt`, pycocotools' COCOeval numbers):
#   1. data: `mrcnn-prep shapes` (SHAPES_OPTS: by default a set a tiny model learns to
#      AP > 30 within the CPU budget: few classes, large shapes, little occlusion, small
#      images), converted to shards for mrcnn and exported back to COCO JSON (compressed
#      RLE) for torchvision;
#   2. weights: per seed, torchvision builds the model (tests/model/net_tv_models.py:
#      build_tiny, build_r50) and data_prep/weights.py imports it for mrcnn. R50's
#      backbone is an "ImageNet" resnet50 (seeded; nothing can be downloaded here) that
#      both sides load (non-identity frozen BN: s over ~0.1..5), stem + res2 frozen
#      (FREEZE_AT 2 / trainable_layers 3); one extra
#      mrcnn run loads that ImageNet file alone (MODEL.WEIGHTS) and logs which tensors
#      were loaded, initialized and unused;
#   3. training: SGD momentum 0.9, weight decay on every trainable tensor (biases too),
#      linear warmup, multistep, batch 2, one image size, horizontal flip, clipping by
#      global norm; mrcnn in fp32, bf16 and fp16 (dynamic loss scale), torchvision fp32;
#   4. evaluation: each side's own inference on the val images -> COCO results JSON ->
#      `mrcnn eval --gt instances_val.json --results ... --json`;
#   5. isolation: mrcnn's trained tiny weights (fp32, first seed), exported by
#      data_prep/weights.py export, run through torchvision's inference and scored by the
#      same evaluator: the AP must equal `mrcnn eval`'s (within 0.2);
#   6. report: OUT/report.md and OUT/report.json (AP mean, std per side, the difference of
#      means and its standard error, the R50 loss band, the isolation check, verdicts)
#      and OUT/loss_curves.png (bench/accuracy_report.py). The exit status is the
#      report's: 0 when every bound holds (QUICK: when the pipeline ran end to end).
#
# Usage:  bash bench/accuracy.sh                 # the full run (sized for < 60 min on 2 cores)
#         QUICK=1 bash bench/accuracy.sh         # ~1-2 min: every step on a few images and
#                                                # iterations, bounds not applied
# Every size is an environment variable (defaults below); OUT (default
# /tmp/mrcnn-accuracy) holds everything; PAR processes run at once (default 2).
# REPORT_ONLY=1 redoes only the evaluation and the report from what OUT holds.
# AB_SEEDS="1 2 3" adds torchvision tiny runs with trainable frozen-BN biases (side
# torchvision-bnbias), mrcnn's semantics for a folded conv, as an A/B check.
# DEADLINE_MIN: jobs not started that many minutes after the start are skipped and
# listed as missing in the report, so the script always ends with a report;
# HARD_DEADLINE_MIN: the runs still going then are stopped (failed in the report).
# OLD_MRCNN: an mrcnn binary built from before the folded-BN preconditioner (40837e8^);
# when set, one R50 fp32 seed trains with it too (side mrcnn-old, plotted, not judged).
# Needs: BUILD (default build/release-cpu, falls back to build/release) with mrcnn and
# mrcnn-prep, mpirun, /usr/bin/python3 with torch + torchvision + h5py (PY_TORCH), and
# python3 with matplotlib (PY_PLOT) for the PNG.
set -euo pipefail

ROOT=${MRCNN_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
BUILD=${BUILD:-build/release-cpu}
[ -x "$ROOT/$BUILD/mrcnn" ] || [ -x "$BUILD/mrcnn" ] || BUILD=build/release
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PY_TORCH=${PY_TORCH:-/usr/bin/python3}
PY_PLOT=${PY_PLOT:-python3}
OUT=${OUT:-/tmp/mrcnn-accuracy}
PAR=${PAR:-2}
QUICK=${QUICK:-0}

if [ "$QUICK" = 1 ]; then # the pipeline end to end, not the numbers
    : "${TRAIN_IMAGES:=16}" "${VAL_IMAGES:=6}" "${IMAGE_SIZE:=96}" "${TINY_SIZE:=96}" "${TINY_ITERS:=10}" "${TINY_SEEDS:=1}"
    : "${R50_ITERS:=2}" "${R50_SEEDS:=1}" "${R50_VAL_IMAGES:=2}" "${DEADLINE_MIN:=15}"
fi
: "${TRAIN_IMAGES:=400}"                  # training images
: "${VAL_IMAGES:=100}"                    # validation images
: "${IMAGE_SIZE:=128}"                    # images are IMAGE_SIZE x IMAGE_SIZE
: "${SHAPES_OPTS:=--classes 2 --objects 1:3 --scale 0.15:0.35 --occlusion 0.1}"
: "${TINY_ITERS:=1500}"                   # iterations of the tiny model
: "${TINY_SEEDS=1 2 3 4 5}"               # (empty: none)
: "${TINY_PRECISIONS:=fp32 bf16 fp16}"    # mrcnn side
: "${TINY_SIZE:=128}"                     # train and test short side (resized from IMAGE_SIZE)
: "${TINY_LR:=0.02}"
: "${R50_ITERS:=200}"                     # iterations of R50-FPN
: "${R50_SEEDS=1 2 3 4 5}"                # (empty: none); 5 a side: with 3 the band is too narrow to judge (bench/README.md)
: "${R50_PRECISIONS:=fp32 bf16}"
: "${R50_SIZE:=64}"                       # R50 short side (resized from IMAGE_SIZE)
: "${R50_LR:=0.01}"
: "${R50_VAL_IMAGES:=10}"                 # R50's AP is not judged: its inference on the first N val images
: "${BATCH:=2}"
: "${WD:=0.0001}"
: "${CLIP:=5.0}"
: "${WARMUP_FACTOR:=0.001}"
: "${DEADLINE_MIN:=50}"
: "${HARD_DEADLINE_MIN:=}"               # (empty: none)
: "${SCORE_THRESH:=0.001}"               # test score threshold, both sides (0.05 leaves weak models with no detections)
: "${IMAGENET_SEED:=1000}"
TINY_WARMUP=${TINY_WARMUP:-$((TINY_ITERS / 10))}
R50_WARMUP=${R50_WARMUP:-$((R50_ITERS / 4))}
TINY_STEPS=${TINY_STEPS:-$((TINY_ITERS * 2 / 3)),$((TINY_ITERS * 8 / 9))}
R50_STEPS=${R50_STEPS:-$((R50_ITERS * 3 / 4))}
CLASSES=$(sed -n 's/.*--classes \([0-9]*\).*/\1/p' <<<"$SHAPES_OPTS")
CLASSES=${CLASSES:-3}
# R50's RPN/ROI sizes, cut from detectron2's 2000/1000 proposals and 512 ROIs so a step fits the CPU
R50_PRE_TRAIN=${R50_PRE_TRAIN:-256} R50_POST_TRAIN=${R50_POST_TRAIN:-128}
R50_PRE_TEST=${R50_PRE_TEST:-128} R50_POST_TEST=${R50_POST_TEST:-64} R50_ROIS=${R50_ROIS:-8}
R50_DETS=${R50_DETS:-20}

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
T_START=$(date +%s)
mkdir -p "$OUT/runs" "$OUT/bin" "$OUT/init"
# Private copies of the binaries: a rebuild during the run does not change them.
cp "$BUILD/mrcnn" "$BUILD/mrcnn-prep" "$OUT/bin/"
[ -z "${OLD_MRCNN:-}" ] || cp "$OLD_MRCNN" "$OUT/bin/mrcnn-old"
M=$OUT/bin/mrcnn
PREP=$OUT/bin/mrcnn-prep
MPIRUN=(mpirun --oversubscribe -np 1)
[ "$(id -u)" = 0 ] && MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 1)
log() { echo "[accuracy $(date +%H:%M:%S) +$(($(date +%s) - T_START))s] $*"; }

# ---- 1. data ----
D=$OUT/data
if [ ! -f "$D/done" ]; then
    rm -rf "$D"
    log "data: $TRAIN_IMAGES + $VAL_IMAGES images ${IMAGE_SIZE}x$IMAGE_SIZE, $SHAPES_OPTS"
    # shellcheck disable=SC2086
    "$PREP" shapes --out "$D" --train "$TRAIN_IMAGES" --val "$VAL_IMAGES" --size "${IMAGE_SIZE}x$IMAGE_SIZE" \
        --seed 7 $SHAPES_OPTS > "$D.log" 2>&1
    for s in train val; do
        "${MPIRUN[@]}" "$PREP" coco --annotations "$D/annotations/instances_$s.json" --images "$D/$s" \
            --out "$D/shards" --shards 1 --name "$s" --strict >> "$D.log" 2>&1
    done
    "$PREP" export "$D/shards/train-index.h5" --out "$D/train_export.json" >> "$D.log" 2>&1
    # the R50 evaluation set: the first R50_VAL_IMAGES val images
    "$PY_TORCH" - "$D/annotations/instances_val.json" "$D/annotations/instances_val_r50.json" "$R50_VAL_IMAGES" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
d["images"] = d["images"][:int(sys.argv[3])]
keep = {im["id"] for im in d["images"]}
d["annotations"] = [a for a in d["annotations"] if a["image_id"] in keep]
json.dump(d, open(sys.argv[2], "w"))
EOF
    "${MPIRUN[@]}" "$PREP" coco --annotations "$D/annotations/instances_val_r50.json" --images "$D/val" \
        --out "$D/shards" --shards 1 --name val_r50 --strict >> "$D.log" 2>&1
    grep -E "shapes:|annotations +[0-9]|image without" "$D.log" | sed 's/^/  /' || true
    touch "$D/done"
fi

# ---- 2. initial weights ----
I=$OUT/init
if [ ! -f "$I/done" ]; then
    log "init: ImageNet stand-in (resnet50 seed $IMAGENET_SEED), tiny and R50 per seed"
    # each call imports its files for mrcnn too (data_prep/weights.py's import, in process)
    "$PY_TORCH" "$ROOT/bench/accuracy_tv.py" init-imagenet --out "$I/imagenet_r50.pth" --json "$D/train_export.json" \
        --images "$D/train" --seed "$IMAGENET_SEED" --size "$R50_SIZE" --h5 "$I/imagenet_r50.h5" > "$I/log" 2>&1
    [ -z "$TINY_SEEDS" ] || "$PY_TORCH" "$ROOT/bench/accuracy_tv.py" init --model tiny --seeds "$TINY_SEEDS" \
        --classes "$CLASSES" --size "$TINY_SIZE" --out "$I/tiny_s{seed}.pth" --h5 "$I/tiny_s{seed}.h5" >> "$I/log" 2>&1
    [ -z "$R50_SEEDS" ] || "$PY_TORCH" "$ROOT/bench/accuracy_tv.py" init --model r50 --seeds "$R50_SEEDS" \
        --classes "$CLASSES" --size "$R50_SIZE" --imagenet "$I/imagenet_r50.pth" --out "$I/r50_s{seed}.pth" \
        --h5 "$I/r50_s{seed}.h5" >> "$I/log" 2>&1
    touch "$I/done"
fi

# ---- 3. the two sides' settings ----
common_sets() { # model
    local size iters lr warm steps
    if [ "$1" = tiny ]; then
        size=$TINY_SIZE iters=$TINY_ITERS lr=$TINY_LR warm=$TINY_WARMUP steps=$TINY_STEPS
    else
        size=$R50_SIZE iters=$R50_ITERS lr=$R50_LR warm=$R50_WARMUP steps=$R50_STEPS
    fi
    echo "--set INPUT.MIN_SIZE_TRAIN=$size --set INPUT.MAX_SIZE_TRAIN=$size --set INPUT.MIN_SIZE_TEST=$size"
    echo "--set INPUT.MAX_SIZE_TEST=$size --set INPUT.RANDOM_FLIP=horizontal --set SOLVER.IMS_PER_BATCH=$BATCH"
    echo "--set SOLVER.BASE_LR=$lr --set SOLVER.MAX_ITER=$iters --set SOLVER.STEPS=$steps --set SOLVER.GAMMA=0.1"
    echo "--set SOLVER.WARMUP_ITERS=$warm --set SOLVER.WARMUP_FACTOR=$WARMUP_FACTOR --set SOLVER.MOMENTUM=0.9"
    echo "--set SOLVER.WEIGHT_DECAY=$WD --set SOLVER.WEIGHT_DECAY_BIAS=$WD --set SOLVER.CLIP_GRADIENTS.ENABLED=true"
    echo "--set SOLVER.CLIP_GRADIENTS.CLIP_VALUE=$CLIP --set SOLVER.CHECKPOINT_PERIOD=$iters --set LOG_PERIOD=$(log_period "$1")"
    echo "--set DATALOADER.NUM_WORKERS=1 --set MODEL.ROI_HEADS.NUM_CLASSES=$CLASSES"
    echo "--set MODEL.ROI_HEADS.SCORE_THRESH_TEST=$SCORE_THRESH"
    if [ "$1" = tiny ]; then
        echo "--set MODEL.ROI_HEADS.DETECTIONS_PER_IMAGE=100"
    else
        echo "--set MODEL.RPN.PRE_NMS_TOPK_TRAIN=$R50_PRE_TRAIN --set MODEL.RPN.POST_NMS_TOPK_TRAIN=$R50_POST_TRAIN"
        echo "--set MODEL.RPN.PRE_NMS_TOPK_TEST=$R50_PRE_TEST --set MODEL.RPN.POST_NMS_TOPK_TEST=$R50_POST_TEST"
        echo "--set MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE=$R50_ROIS --set MODEL.ROI_HEADS.DETECTIONS_PER_IMAGE=$R50_DETS"
    fi
}
log_period() { # loss-curve points (window means): ~40 for tiny, ~20 for R50
    local n
    n=$([ "$1" = tiny ] && echo $((TINY_ITERS / 40)) || echo $((R50_ITERS / 20)))
    echo $((n > 0 ? n : 1))
}
config_of() { [ "$1" = tiny ] && echo "$ROOT/configs/tiny.yaml" || echo "$ROOT/configs/r50_fpn_1x.yaml"; }
val_of() { [ "$1" = tiny ] && echo val || echo val_r50; }

# A JSON number from bc's output: bc writes ".93" for 0.93 (not JSON) and "-.5".
num() { awk -v x="${1:-0}" 'BEGIN { printf "%.3f", x + 0 }'; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%d", b - a }'; } # whole seconds from t0 to t1

meta() { # dir side model precision seed status
    printf '{"side": "%s", "model": "%s", "precision": "%s", "seed": %s, "status": "%s", "train_s": %s, "eval_s": %s}\n' \
        "$2" "$3" "$4" "$5" "$6" "$(num "${7:-0}")" "$(num "${8:-0}")" > "$1/meta.json"
}

mrcnn_job() { # model precision seed [old]
    local model=$1 prec=$2 seed=$3 side=mrcnn${4:+-$4} iters t0 t1 t2 bin=$M
    local dir=$OUT/runs/$side-$1-$2-s$3
    [ "${4:-}" = old ] && bin=$OUT/bin/mrcnn-old
    iters=$([ "$model" = tiny ] && echo "$TINY_ITERS" || echo "$R50_ITERS")
    rm -rf "$dir" && mkdir -p "$dir"
    # shellcheck disable=SC2046
    local sets=($(common_sets "$model") --set "SEED=$seed" --set "SOLVER.PRECISION=$prec"
                --set "MODEL.WEIGHTS=$I/${model}_s$seed.h5")
    t0=$(date +%s.%N)
    if ! "$bin" train --config "$(config_of "$model")" --set "DATASETS.TRAIN=$D/shards/train-index.h5" \
            --set "OUTPUT_DIR=$dir/train" "${sets[@]}" > "$dir/train.log" 2>&1; then
        meta "$dir" "$side" "$model" "$prec" "$seed" failed; log "FAILED $dir (train.log)"; return
    fi
    t1=$(date +%s.%N)
    if [ "$side" = mrcnn-old ]; then # the loss curve is what it is for
        meta "$dir" "$side" "$model" "$prec" "$seed" ok "$(echo "$t1 - $t0" | bc)" 0
        log "done $dir: train $(secs "$t0" "$t1") s"; return
    fi
    "$M" eval --config "$(config_of "$model")" "${sets[@]}" --weights "$dir/train/model_$(printf %07d "$iters").h5" \
        --shards "$D/shards/$(val_of "$model")-index.h5" --out "$dir/inference" --threads 1 > "$dir/eval.log" 2>&1 ||
        { meta "$dir" mrcnn "$model" "$prec" "$seed" failed; log "FAILED $dir (eval.log)"; return; }
    t2=$(date +%s.%N)
    cp "$dir/inference/coco_instances_results.json" "$dir/results.json"
    meta "$dir" mrcnn "$model" "$prec" "$seed" ok "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"
    log "done $dir: train $(secs "$t0" "$t1") s, eval $(secs "$t1" "$t2") s"
}

tv_job() { # model seed [bnbias]
    local model=$1 seed=$2 side=torchvision${3:+-$3} size iters lr warm steps kw t0 t1 vj ab=()
    local dir=$OUT/runs/$side-$1-fp32-s$2
    [ "${3:-}" = bnbias ] && ab=(--bn-bias-trainable)
    rm -rf "$dir" && mkdir -p "$dir"
    if [ "$model" = tiny ]; then
        size=$TINY_SIZE iters=$TINY_ITERS lr=$TINY_LR warm=$TINY_WARMUP steps=$TINY_STEPS kw="box_score_thresh=$SCORE_THRESH" vj=instances_val.json
    else
        size=$R50_SIZE iters=$R50_ITERS lr=$R50_LR warm=$R50_WARMUP steps=$R50_STEPS vj=instances_val_r50.json
        kw="box_score_thresh=$SCORE_THRESH,rpn_pre_nms_top_n_train=$R50_PRE_TRAIN,rpn_post_nms_top_n_train=$R50_POST_TRAIN"
        kw+=",rpn_pre_nms_top_n_test=$R50_PRE_TEST,rpn_post_nms_top_n_test=$R50_POST_TEST"
        kw+=",box_batch_size_per_image=$R50_ROIS"
    fi
    t0=$(date +%s.%N)
    if ! "$PY_TORCH" "$ROOT/bench/accuracy_tv.py" train --model "$model" --init "$I/${model}_s$seed.pth" \
            --classes "$CLASSES" --train-json "$D/train_export.json" --train-dir "$D/train" \
            --val-json "$D/annotations/$vj" --val-dir "$D/val" --out "$dir" --seed "$seed" --iters "$iters" \
            --batch "$BATCH" --lr "$lr" --momentum 0.9 --wd "$WD" --steps "$steps" --warmup-iters "$warm" \
            --warmup-factor "$WARMUP_FACTOR" --clip "$CLIP" --size "$size" --max-size "$size" --flip 1 \
            --det-per-img "$([ "$model" = tiny ] && echo 100 || echo "$R50_DETS")" --kw "$kw" --log-period "$(log_period "$model")" \
            "${ab[@]}" > "$dir/train.log" 2>&1; then
        meta "$dir" "$side" "$model" fp32 "$seed" failed; log "FAILED $dir (train.log)"; return
    fi
    t1=$(date +%s.%N)
    cp "$dir/coco_instances_results.json" "$dir/results.json"
    meta "$dir" "$side" "$model" fp32 "$seed" ok \
        "$("$PY_TORCH" -c "import json;print(json.load(open('$dir/timing.json'))['train_s'])")" \
        "$("$PY_TORCH" -c "import json;print(json.load(open('$dir/timing.json'))['eval_s'])")"
    log "done $dir: $(secs "$t0" "$t1") s"
}

imagenet_job() { # the fine-tuning load: MODEL.WEIGHTS = the ImageNet file alone, one step
    local dir=$OUT/runs/imagenet-load
    rm -rf "$dir" && mkdir -p "$dir"
    # shellcheck disable=SC2046
    "$M" train --config "$ROOT/configs/r50_fpn_1x.yaml" --set "DATASETS.TRAIN=$D/shards/train-index.h5" \
        --set "OUTPUT_DIR=$dir/train" $(common_sets r50) --set SEED=1 --set SOLVER.PRECISION=fp32 \
        --set "MODEL.WEIGHTS=$I/imagenet_r50.h5" --set MODEL.BACKBONE.FREEZE_AT=2 --max-steps 1 \
        > "$dir/train.log" 2>&1 && log "done $dir" || log "FAILED $dir"
}

# ---- 4. the queue, PAR at a time: the ImageNet load (short), then whole seeds, an R50
# seed after every two tiny seeds, so that a deadline leaves seeds of both models ----
JOBS_LIST=()
[ -n "$R50_SEEDS" ] && JOBS_LIST=("imagenet_job") # the ImageNet load belongs to the R50 part
# TV_RUNS=0: no torchvision runs (more mrcnn runs against the torchvision runs of another OUT)
r50_seed() {
    [ "${TV_RUNS:-1}" = 0 ] || JOBS_LIST+=("tv_job r50 $1")
    for p in $R50_PRECISIONS; do JOBS_LIST+=("mrcnn_job r50 $p $1"); done
}
tiny_seed() {
    [ "${TV_RUNS:-1}" = 0 ] || JOBS_LIST+=("tv_job tiny $1")
    for p in $TINY_PRECISIONS; do JOBS_LIST+=("mrcnn_job tiny $p $1"); done
}
# shellcheck disable=SC2206
R50_Q=($R50_SEEDS) TINY_Q=($TINY_SEEDS)
while [ ${#R50_Q[@]} -gt 0 ] || [ ${#TINY_Q[@]} -gt 0 ]; do
    [ ${#R50_Q[@]} -gt 0 ] && { r50_seed "${R50_Q[0]}"; R50_Q=("${R50_Q[@]:1}"); }
    for _ in 1 2; do
        [ ${#TINY_Q[@]} -gt 0 ] && { tiny_seed "${TINY_Q[0]}"; TINY_Q=("${TINY_Q[@]:1}"); }
    done
done
# the fold without the s^2 preconditioner, one seed beside the others
# shellcheck disable=SC2086
set -- $R50_SEEDS
[ -n "${OLD_MRCNN:-}" ] && [ $# -gt 0 ] && JOBS_LIST+=("mrcnn_job r50 fp32 $1 old")
# AB_SEEDS: torchvision tiny runs whose frozen-BN biases train, as mrcnn's folded convs'
# biases do (src/model/layers.c): an A/B check of that difference
for s in ${AB_SEEDS:-}; do JOBS_LIST+=("tv_job tiny $s bnbias"); done
# REPORT_ONLY=1: only step 5 on what OUT holds (e.g. after an interrupted run)
[ "${REPORT_ONLY:-0}" = 1 ] && JOBS_LIST=() || : > "$OUT/skipped.txt"
log "${#JOBS_LIST[@]} jobs, $PAR at a time; tiny: $TINY_ITERS iters (warmup $TINY_WARMUP, steps $TINY_STEPS) at $TINY_SIZE; r50: $R50_ITERS iters (warmup $R50_WARMUP, steps $R50_STEPS) at $R50_SIZE"
# HARD_DEADLINE_MIN: the runs still going then are stopped (their training or inference
# process gets SIGTERM; the job records it as failed), so that the report comes in time
wait_below() { # N: until fewer than N jobs run
    local p c
    while [ "$(jobs -rp | wc -l)" -ge "$1" ]; do
        if [ -n "$HARD_DEADLINE_MIN" ] && [ $(($(date +%s) - T_START)) -ge $((HARD_DEADLINE_MIN * 60)) ]; then
            for p in $(jobs -rp); do
                for c in $(ps -o pid= --ppid "$p"); do kill -TERM "$c" 2> /dev/null || true; done
            done
            [ -f "$OUT/hard_deadline" ] || { log "HARD_DEADLINE_MIN=$HARD_DEADLINE_MIN: stopping the running jobs"; touch "$OUT/hard_deadline"; }
        fi
        sleep 2
    done
}
rm -f "$OUT/hard_deadline"
for job in "${JOBS_LIST[@]}"; do
    wait_below "$PAR"
    if [ $(($(date +%s) - T_START)) -ge $((DEADLINE_MIN * 60)) ]; then
        log "skipped (past DEADLINE_MIN=$DEADLINE_MIN): $job"
        echo "$job" >> "$OUT/skipped.txt"
        continue
    fi
    log "start: $job"
    $job &
done
wait_below 1
wait

# ---- 5. one evaluator for both sides, then the report ----
for dir in "$OUT"/runs/*/; do
    [ -f "$dir/results.json" ] || continue
    case $dir in *-r50-*) gt=$D/annotations/instances_val_r50.json ;; *) gt=$D/annotations/instances_val.json ;; esac
    "$M" eval --gt "$gt" --results "$dir/results.json" --iou-type both --json "$dir/stats.json" --threads 1 \
        > "$dir/coco_eval.txt" 2>&1 || log "eval failed: $dir"
done

# ---- 6. training isolated from inference: mrcnn's weights through torchvision's inference ----
isolation_check() {
    local seed run iso=$OUT/isolation w
    # shellcheck disable=SC2086
    seed=$(set -- $TINY_SEEDS; echo "${1:-}")
    run=$OUT/runs/mrcnn-tiny-fp32-s$seed
    rm -rf "$iso" && mkdir -p "$iso"
    w=$run/train/model_$(printf %07d "$TINY_ITERS").h5
    if [ -z "$seed" ] || [ ! -f "$run/stats.json" ] || [ ! -f "$w" ]; then
        echo '{"status": "no tiny mrcnn fp32 run"}' > "$iso/meta.json"; return
    fi
    if "$PY_TORCH" "$ROOT/data_prep/weights.py" export "$w" "$iso/mrcnn_trained.pth" > "$iso/log" 2>&1 &&
        "$PY_TORCH" "$ROOT/bench/accuracy_tv.py" infer --model tiny --weights "$iso/mrcnn_trained.pth" \
            --classes "$CLASSES" --val-json "$D/annotations/instances_val.json" --val-dir "$D/val" \
            --out "$iso/results_tv.json" --size "$TINY_SIZE" --max-size "$TINY_SIZE" --det-per-img 100 \
            --kw "box_score_thresh=$SCORE_THRESH" >> "$iso/log" 2>&1 &&
        "$M" eval --gt "$D/annotations/instances_val.json" --results "$iso/results_tv.json" --iou-type both \
            --json "$iso/stats_tv.json" --threads 1 >> "$iso/log" 2>&1; then
        cp "$run/stats.json" "$iso/stats_mrcnn.json"
        echo "{\"status\": \"ok\", \"run\": \"mrcnn-tiny-fp32-s$seed\"}" > "$iso/meta.json"
        log "isolation check ran: mrcnn-tiny-fp32-s$seed through torchvision's inference"
    else
        echo "{\"status\": \"failed (isolation/log)\", \"run\": \"mrcnn-tiny-fp32-s$seed\"}" > "$iso/meta.json"
        log "isolation check FAILED ($iso/log)"
    fi
}
[ -z "$TINY_SEEDS" ] || isolation_check

T_END=$(date +%s)
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
[ "${REPORT_ONLY:-0}" = 1 ] && [ -f "$OUT/run.json" ] ||
cat > "$OUT/run.json" <<EOF
{"wall_s": $((T_END - T_START)), "par": $PAR, "quick": $QUICK, "load": "$LOAD", "image_size": $IMAGE_SIZE,
 "tiny_iters": $TINY_ITERS, "tiny_lr": $TINY_LR, "tiny_size": $TINY_SIZE, "r50_iters": $R50_ITERS, "r50_lr": $R50_LR,
 "r50_size": $R50_SIZE, "train_images": $TRAIN_IMAGES, "val_images": $VAL_IMAGES, "r50_val_images": $R50_VAL_IMAGES,
 "shapes": "$SHAPES_OPTS", "old_mrcnn": "${OLD_MRCNN:-}"}
EOF
rc=0
REPORT_ARGS=()
[ "$QUICK" = 1 ] && REPORT_ARGS=(--quick)
"$PY_PLOT" "$ROOT/bench/accuracy_report.py" "$OUT" "${REPORT_ARGS[@]}" || rc=$?
log "total wall time $((T_END - T_START)) s (load $LOAD); report: $OUT/report.md, $OUT/report.json, curves: $OUT/loss_curves.png; exit $rc"
exit "$rc"
