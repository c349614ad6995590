#!/usr/bin/env bash
# `make demo`: the whole pipeline on an embedded default, on this machine.
#   1. a synthetic COCO-format dataset of circles, squares and triangles (mrcnn-prep shapes)
#   2. converted to HDF5 shards by 2 MPI ranks (mrcnn-prep coco)
#   3. the tiny Mask R-CNN (configs/tiny.yaml) trained by 2 MPI ranks, on the GPU when
#      one is present and the build has CUDA, else on the CPU
#   4. ends at a checkpoint, metrics.json, TensorBoard events and the training curves
#      (gnuplot), then evaluates (precision-recall and per-category AP pictures) and predicts
# Env: BUILD (build dir, set by make), DEMO_DIR (default demo-out), DEMO_STEPS (default
# 500), DEMO_IMAGES (training images, default 128). Under 10 minutes on 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/release}
DEMO_DIR=${DEMO_DIR:-demo-out}
STEPS=${DEMO_STEPS:-500}
IMAGES=${DEMO_IMAGES:-128}
M=$BUILD/mrcnn P=$BUILD/mrcnn-prep
for b in "$M" "$P"; do [ -x "$b" ] || { echo "demo: $b is missing; run make first" >&2; exit 1; }; done
# One OpenMP/BLAS thread per rank: 2 ranks on 2 cores.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
MPIRUN=(mpirun --oversubscribe -np 2)

device=cpu
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L > /dev/null 2>&1 \
    && "$M" version 2>/dev/null | grep -q "cuda backend: available"; then
    device=cuda
fi
t0=$(date +%s)
rm -rf "$DEMO_DIR"
mkdir -p "$DEMO_DIR"
echo "== demo: 1/3 synthetic dataset ($IMAGES training images) -> $DEMO_DIR/raw"
"$P" shapes --out "$DEMO_DIR/raw" --train "$IMAGES" --val 16 --size 128x128
echo "== demo: 2/3 COCO -> HDF5 shards with 2 ranks -> $DEMO_DIR/shards"
"${MPIRUN[@]}" "$P" coco --annotations "$DEMO_DIR/raw/annotations/instances_train.json" \
    --images "$DEMO_DIR/raw/train" --out "$DEMO_DIR/shards" --name train --shards 2
"${MPIRUN[@]}" "$P" coco --annotations "$DEMO_DIR/raw/annotations/instances_val.json" \
    --images "$DEMO_DIR/raw/val" --out "$DEMO_DIR/shards" --name val --shards 1
echo "== demo: 3/3 training the tiny config with 2 ranks on the $device, $STEPS steps -> $DEMO_DIR/train"
# 4 images per step (2 per rank); gradient clipping keeps the from-scratch start stable.
"${MPIRUN[@]}" "$M" train --config configs/tiny.yaml --comm-timeout 120 \
    --set MODEL.DEVICE=$device \
    --set DATASETS.TRAIN="$DEMO_DIR/shards/train-index.h5" --set DATASETS.TEST="$DEMO_DIR/shards/val-index.h5" \
    --set OUTPUT_DIR="$DEMO_DIR/train" --set SOLVER.IMS_PER_BATCH=4 --set SOLVER.MAX_ITER="$STEPS" \
    --set SOLVER.STEPS="[$((STEPS * 3 / 4))]" --set SOLVER.WARMUP_ITERS=20 --set SOLVER.CHECKPOINT_PERIOD=100 \
    --set SOLVER.CLIP_GRADIENTS.ENABLED=true --set SOLVER.CLIP_GRADIENTS.CLIP_VALUE=5 --set LOG_PERIOD=20

# The loss must be finite and falling: mean of the first 20 steps against the last 20.
read -r first last < <(awk -v n="$STEPS" '
    match($0, /"step": [0-9]+/) { s = substr($0, RSTART + 8, RLENGTH - 8) + 0 }
    match($0, /"total_loss": [-+0-9.eE]+/) { v = substr($0, RSTART + 14, RLENGTH - 14) + 0;
        if (s <= 20) { a += v; na++ } if (s > n - 20) { b += v; nb++ } }
    END { if (na && nb) printf "%.4f %.4f\n", a / na, b / nb; else print "nan nan" }' "$DEMO_DIR/train/metrics.json")
ckpt=$(ls -1 "$DEMO_DIR/train"/model_*.h5 | sort | tail -n 1)
echo
echo "== demo finished in $(( $(date +%s) - t0 )) s on the $device"
echo "   dataset      $DEMO_DIR/raw (COCO json + jpgs)"
echo "   shards       $DEMO_DIR/shards/train-index.h5, val-index.h5"
echo "   checkpoint   $ckpt"
echo "   metrics      $DEMO_DIR/train/metrics.json"
echo "   tensorboard  tensorboard --logdir $DEMO_DIR/train"
echo "   curves       $DEMO_DIR/train/plots/training.png (losses, lr, img/s, memory; series in training.csv)"
echo "   loss         $first (first 20 steps) -> $last (last 20 steps)"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a == a + 0 && b == b + 0 && b < a) }' \
    || { echo "demo: the loss did not fall ($first -> $last)" >&2; exit 1; }

# ---- evaluation and prediction (mrcnn eval / mrcnn predict) ------------------------
# The trained model on the val split: COCO box and mask AP computed by 2 ranks, and
# prediction pictures of a few val images.
echo
echo "== demo: evaluating $ckpt on the val split with 2 ranks -> $DEMO_DIR/eval"
mkdir -p "$DEMO_DIR/eval"
"${MPIRUN[@]}" "$M" eval --config configs/tiny.yaml --weights "$ckpt" --set MODEL.DEVICE=$device \
    --shards "$DEMO_DIR/shards/val-index.h5" --out "$DEMO_DIR/eval" --json "$DEMO_DIR/eval/stats.json" \
    --plots "$DEMO_DIR/eval/plots" \
    > "$DEMO_DIR/eval/summary.txt"
cat "$DEMO_DIR/eval/summary.txt"
box_ap=$(awk '/\*bbox\*/ { getline; print $NF; exit }' "$DEMO_DIR/eval/summary.txt")
mask_ap=$(awk '/\*segm\*/ { getline; print $NF; exit }' "$DEMO_DIR/eval/summary.txt")
mapfile -t val_images < <(ls -1 "$DEMO_DIR/raw/val"/*.jpg | head -n 4)
"$M" predict --config configs/tiny.yaml --weights "$ckpt" --set MODEL.DEVICE=$device \
    --set DATASETS.TEST="$DEMO_DIR/shards/val-index.h5" --out "$DEMO_DIR/predict" "${val_images[@]}"
echo
echo "== demo evaluation and prediction done ($(( $(date +%s) - t0 )) s since the start)"
echo "   box AP       $box_ap   (COCO AP@[.5:.95] on the val split; full summary $DEMO_DIR/eval/summary.txt)"
echo "   mask AP      $mask_ap"
echo "   results      $DEMO_DIR/eval/coco_instances_results.json, stats $DEMO_DIR/eval/stats.json"
echo "   eval plots   $DEMO_DIR/eval/plots/eval_{bbox,segm}_pr.png (precision-recall), eval_{bbox,segm}_categories.png"
echo "   predictions  $DEMO_DIR/predict/*.png (${#val_images[@]} val images), $DEMO_DIR/predict/detections.json"
