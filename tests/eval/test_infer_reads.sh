#!/usr/bin/env bash
# Inference reads its results back once per batch: `mrcnn predict` and `mrcnn eval
# --shards` run the box post-processing, the mask head and the mask probabilities as
# backend ops and make at most ONE device -> host read per image (a batch of one), as
# the backend's own read counter (backend.h, mrcnn_backend_stats.reads) counts it; on a
# GPU each read is a wait. The CPU backend counts what the same calls cost on a GPU.
# The count comes from the line the inference logs when it ends ("inference on cpu: N
# images, R device->host reads, at most X per image"). A 1-step model on 3 images of
# 64 x 64 at score threshold 0, so that every image has detections and the mask head
# runs. The code before this test read the box head's logits and deltas, the proposals
# and the mask logits (6 reads per image; it printed no such line).
set -u
cd "${ROOT:=$(cd "$(dirname "$0")/../.." && pwd)}"
BUILD=${BUILD:-build/release}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
M=$BUILD/mrcnn P=$BUILD/mrcnn-prep
[ -x "$M" ] && [ -x "$P" ] || { echo "FAIL: not built: $M / $P"; exit 1; }
F=$tmp/fix
{ "$P" shapes --out "$F/raw" --train 2 --val 3 --size 64x64 \
    && mpirun --oversubscribe -np 1 "$P" coco --annotations "$F/raw/annotations/instances_train.json" \
        --images "$F/raw/train" --out "$F/shards" --name train --shards 1 \
    && mpirun --oversubscribe -np 1 "$P" coco --annotations "$F/raw/annotations/instances_val.json" \
        --images "$F/raw/val" --out "$F/shards" --name val --shards 1 \
    && "$M" train --config "$ROOT/configs/tiny.yaml" --set DATASETS.TRAIN="$F/shards/train-index.h5" \
        --set OUTPUT_DIR="$F/train" --set SOLVER.MAX_ITER=1 --set SOLVER.IMS_PER_BATCH=2 \
        --set SOLVER.CHECKPOINT_PERIOD=1 --set LOG_PERIOD=1; } > "$tmp/fix.log" 2>&1 \
    || { echo "FAIL: making the fixture"; tail -20 "$tmp/fix.log"; exit 1; }
CKPT=$F/train/model_0000001.h5
[ -f "$CKPT" ] || { echo "FAIL: no checkpoint $CKPT"; ls "$F/train"; exit 1; }
CFG=(--config "$ROOT/configs/tiny.yaml" --set MODEL.ROI_HEADS.SCORE_THRESH_TEST=0 --weights "$CKPT")

# check LOG WHAT: the reads line says 3 images, at most one read each, and detections exist
check() {
    local line
    line=$(grep -m1 -E "inference on [a-z]+: [0-9]+ images, [0-9]+ device->host reads, at most [0-9]+ per image" "$1")
    [ -n "$line" ] || { echo "FAIL: $2: no reads line in its log"; tail -5 "$1"; exit 1; }
    local n r x
    read -r n r x < <(echo "$line" | sed -E 's/.*: ([0-9]+) images, ([0-9]+) device->host reads, at most ([0-9]+) per image.*/\1 \2 \3/')
    [ "$n" = 3 ] || { echo "FAIL: $2: $n images, expected 3 ($line)"; exit 1; }
    [ "$x" -le 1 ] || { echo "FAIL: $2: up to $x device->host reads per image, at most 1 wanted ($line)"; exit 1; }
    echo "ok: $2: $line"
}

"$M" predict "${CFG[@]}" --out "$tmp/pred" --score-thresh 0 "$F"/raw/val/*.jpg > "$tmp/pred.log" 2>&1 \
    || { echo "FAIL: predict"; tail -20 "$tmp/pred.log"; exit 1; }
check "$tmp/pred.log" "mrcnn predict"
python3 -c "
import json, sys
d = json.load(open('$tmp/pred/detections.json'))
ids = {r['image_id'] for r in d}
sys.exit(0 if ids == {1, 2, 3} else 'detections for images %s, expected 1, 2, 3' % sorted(ids))" \
    || { echo "FAIL: predict: not every image has detections (the mask head must run)"; exit 1; }

mpirun --oversubscribe -np 1 "$M" eval "${CFG[@]}" --shards "$F/shards/val-index.h5" --out "$tmp/eval" \
    > "$tmp/eval.log" 2>&1 || { echo "FAIL: eval --shards"; tail -20 "$tmp/eval.log"; exit 1; }
check "$tmp/eval.log" "mrcnn eval --shards"
echo "PASS"
