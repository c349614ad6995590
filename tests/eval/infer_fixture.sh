# Sourced by test_infer.sh and test_predict.sh: a synthetic shapes set (category ids
# 1, 3, 7: with gaps), its shards, and a tiny model trained for a few seconds.
# Sets M, P, FIX (the folder), CKPT, CFG_ARGS. Needs BUILD, ROOT and a $tmp to fill.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
M=$BUILD/mrcnn P=$BUILD/mrcnn-prep
[ -x "$M" ] && [ -x "$P" ] || { echo "FAIL: not built: $M / $P"; exit 1; }
FIX=$tmp/fix
fixture() {
    "$P" shapes --out "$FIX/raw" --train 32 --val 8 --size 128x128 > "$FIX.log" 2>&1 \
        && mpirun --oversubscribe -np 1 "$P" coco --annotations "$FIX/raw/annotations/instances_train.json" \
            --images "$FIX/raw/train" --out "$FIX/shards" --name train --shards 1 >> "$FIX.log" 2>&1 \
        && mpirun --oversubscribe -np 2 "$P" coco --annotations "$FIX/raw/annotations/instances_val.json" \
            --images "$FIX/raw/val" --out "$FIX/shards" --name val --shards 2 >> "$FIX.log" 2>&1 \
        && "$M" train --config "$ROOT/configs/tiny.yaml" --set DATASETS.TRAIN="$FIX/shards/train-index.h5" \
            --set OUTPUT_DIR="$FIX/train" --set SOLVER.MAX_ITER=60 --set SOLVER.STEPS=[50] --set SOLVER.IMS_PER_BATCH=4 \
            --set SOLVER.CHECKPOINT_PERIOD=60 --set SOLVER.CLIP_GRADIENTS.ENABLED=true \
            --set SOLVER.CLIP_GRADIENTS.CLIP_VALUE=5 --set LOG_PERIOD=20 >> "$FIX.log" 2>&1
}
mkdir -p "$FIX"
fixture || { echo "FAIL: making the fixture (data + 60 training steps)"; tail -20 "$FIX.log"; exit 1; }
CKPT=$FIX/train/model_0000060.h5
[ -f "$CKPT" ] || { echo "FAIL: no checkpoint $CKPT"; ls "$FIX/train"; exit 1; }
# A low score threshold, so that a briefly trained model still detects something everywhere.
CFG_ARGS=(--config "$ROOT/configs/tiny.yaml" --set MODEL.ROI_HEADS.SCORE_THRESH_TEST=0.01)
