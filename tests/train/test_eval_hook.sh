#!/usr/bin/env bash
# TEST.EVAL_PERIOD: `mrcnn train` evaluates its current weights on DATASETS.TEST every
# EVAL_PERIOD steps and at the end (tiny config, synthetic shapes, CPU):
#  - eval lines and metrics.json entries (eval/bbox_AP, eval/bbox_AP50, eval/segm_AP,
#    eval/segm_AP50) at exactly the steps due, counting every val image once;
#  - the TensorBoard events carry the same scalars (when tensorboard is installed);
#  - the AP at the end equals, to the last digit, what `mrcnn eval --weights <final
#    checkpoint>` computes for the same weights, with 1 and with 2 ranks (5 val
#    images: 2 ranks pad the last step), and is above 0 (so equality means something);
#  - TEST.EVAL_PERIOD without DATASETS.TEST exits 2.
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
M=$BUILD/mrcnn P=$BUILD/mrcnn-prep
[ -x "$M" ] && [ -x "$P" ] || { echo "not built: $M / $P"; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
{ "$P" shapes --out "$tmp/raw" --train 32 --val 5 --size 128x128 \
    && mpirun --oversubscribe -np 1 "$P" coco --annotations "$tmp/raw/annotations/instances_train.json" \
        --images "$tmp/raw/train" --out "$tmp/shards" --name train --shards 1 \
    && mpirun --oversubscribe -np 2 "$P" coco --annotations "$tmp/raw/annotations/instances_val.json" \
        --images "$tmp/raw/val" --out "$tmp/shards" --name val --shards 2; } > "$tmp/prep.log" 2>&1 \
    || { echo "FAIL: making the data"; tail -20 "$tmp/prep.log"; exit 1; }
VAL=$tmp/shards/val-index.h5
# A low score threshold, so that a briefly trained model detects something.
CFG=(--config "$ROOT/configs/tiny.yaml" --set MODEL.ROI_HEADS.SCORE_THRESH_TEST=0.01)
COMMON=("${CFG[@]}" --set DATASETS.TRAIN="$tmp/shards/train-index.h5" --set SOLVER.IMS_PER_BATCH=4
        --set SOLVER.CLIP_GRADIENTS.ENABLED=true --set SOLVER.CLIP_GRADIENTS.CLIP_VALUE=5 --set LOG_PERIOD=5
        --set SOLVER.CHECKPOINT_PERIOD=0)

"$M" train "${COMMON[@]}" --set TEST.EVAL_PERIOD=5 --set OUTPUT_DIR="$tmp/none" > "$tmp/none.log" 2>&1
[ $? -eq 2 ] && grep -q "DATASETS.TEST is empty" "$tmp/none.log" \
    || { echo "FAIL: TEST.EVAL_PERIOD without DATASETS.TEST must exit 2"; cat "$tmp/none.log"; exit 1; }

train() { # np out [args...]
    local np=$1 out=$2; shift 2
    mpirun --oversubscribe -np "$np" "$M" train "${COMMON[@]}" --set DATASETS.TEST="$VAL" --set OUTPUT_DIR="$tmp/$out" \
        "$@" > "$tmp/$out.log" 2>&1 || { echo "FAIL: train -np $np $out $*"; tail -30 "$tmp/$out.log"; exit 1; }
}
evaluate() { # np out weights
    mpirun --oversubscribe -np "$1" "$M" eval "${CFG[@]}" --weights "$3" --shards "$VAL" --out "$tmp/$2" \
        --json "$tmp/$2.json" > "$tmp/$2.log" 2>&1 || { echo "FAIL: eval -np $1 $3"; tail -20 "$tmp/$2.log"; exit 1; }
}
# 1 rank from scratch: evaluations after steps 12 and 24, and at the end (30).
train 1 r1 --set TEST.EVAL_PERIOD=12 --set SOLVER.MAX_ITER=30 --set SOLVER.STEPS=[25]
evaluate 1 e1 "$tmp/r1/model_0000030.h5"
# 2 ranks, continuing from those weights: after steps 4 and 8, and at the end (10).
train 2 r2 --set TEST.EVAL_PERIOD=4 --set SOLVER.MAX_ITER=10 --set SOLVER.WARMUP_ITERS=0 \
    --set MODEL.WEIGHTS="$tmp/r1/model_0000030.h5"
evaluate 2 e2 "$tmp/r2/model_0000010.h5"
evaluate 1 e21 "$tmp/r2/model_0000010.h5"

for run in "r1 12 24 30" "r2 4 8 10"; do
    set -- $run
    got=$(grep -o "eval at step [0-9]* (5 images" "$tmp/$1.log" | awk '{print $4}' | tr '\n' ' ')
    [ "$got" = "$2 $3 $4 " ] || { echo "FAIL: $1: eval lines at steps '$got', want '$2 $3 $4 '"; grep "eval at" "$tmp/$1.log"; exit 1; }
done
echo "ok: eval lines at steps 12 24 30 (1 rank) and 4 8 10 (2 ranks), 5 images each"

$PY_COCO - "$tmp" <<'PY' || exit 1
import glob, json, sys
d = sys.argv[1]
keys = ["eval/bbox_AP", "eval/bbox_AP50", "eval/segm_AP", "eval/segm_AP50"]
def evals(run):
    out = {}
    for l in open(f"{d}/{run}/metrics.json"):
        j = json.loads(l)
        if "eval/bbox_AP" in j:
            assert all(k in j for k in keys) and j["eval/images"] == 5, j
            out[j["step"]] = [j[k] for k in keys]
    return out
def stats(name):
    j = json.load(open(f"{d}/{name}.json"))
    return [j["bbox"]["stats"][0], j["bbox"]["stats"][1], j["segm"]["stats"][0], j["segm"]["stats"][1]]
r1, r2 = evals("r1"), evals("r2")
assert sorted(r1) == [12, 24, 30] and sorted(r2) == [4, 8, 10], (sorted(r1), sorted(r2))
for run, last, ev in (("1 rank", r1[30], "e1"), ("2 ranks", r2[10], "e2"), ("2 ranks (eval on 1)", r2[10], "e21")):
    ref = stats(ev)
    print(f"{run}: train's last eval {last}, mrcnn eval {ref}")
    assert last == ref, (run, last, ref)
assert r1[30][0] > 0 and r1[30][2] > 0, r1
assert r1[12] != r1[30], "the evaluation does not follow the weights"
try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("tensorboard missing: events not checked")
else:
    acc = EventAccumulator(f"{d}/r2", size_guidance={"scalars": 0})
    acc.Reload()
    for i, k in enumerate(keys):
        ev = acc.Scalars(k)
        assert [e.step for e in ev] == [4, 8, 10], (k, [e.step for e in ev])
        assert abs(ev[-1].value - r2[10][i]) < 1e-6, (k, ev[-1].value, r2[10][i])
    print("events: eval scalars at steps 4 8 10")
PY
echo PASS
