#!/usr/bin/env bash
# MODEL.WEIGHTS with part of the model (fine-tuning, bench/accuracy.sh): the tensors the
# file lacks keep their initialization, and the log lists which tensors were loaded,
# which initialized and which datasets of the file went unused (/model and /extra).
# Loaded tensors are bit-identical to the file's; an initialized one equals a run
# without MODEL.WEIGHTS (same SEED); a file with none of the model's tensors fails.
set -u
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-}${ASAN_OPTIONS:+:}fast_unwind_on_malloc=0"
. "${ROOT:-$(dirname "$0")/../..}/tests/common/skip.sh"
M=$BUILD/mrcnn P=$BUILD/mrcnn-prep
[ -x "$M" ] && [ -x "$P" ] || { echo "not built: $M / $P"; exit 1; }
PY=${PY_TORCH:-/usr/bin/python3}
$PY -c 'import h5py, numpy' 2>/dev/null || skip torch "h5py/numpy not importable by $PY"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$P" shapes --out "$tmp/raw" --train 8 --val 2 --size 96x96 > /dev/null 2>&1 || fail "shapes"
"$P" coco --annotations "$tmp/raw/annotations/instances_train.json" --images "$tmp/raw/train" \
    --out "$tmp/shards" --name train --shards 1 > "$tmp/prep.log" 2>&1 || { cat "$tmp/prep.log"; fail "coco"; }
COMMON="--config $ROOT/configs/tiny.yaml --set DATASETS.TRAIN=$tmp/shards/train-index.h5 --set SOLVER.BASE_LR=0
        --set SOLVER.CHECKPOINT_PERIOD=1 --set DATALOADER.NUM_WORKERS=1 --set SEED=5"
"$M" train $COMMON --set OUTPUT_DIR="$tmp/a" --max-steps 1 > "$tmp/a.log" 2>&1 || { tail "$tmp/a.log"; fail "train a"; }
# Another seed's weights, without the heads' predictors, with one foreign dataset and an /extra group.
"$M" train $COMMON --set OUTPUT_DIR="$tmp/b" --set SEED=6 --max-steps 1 > "$tmp/b.log" 2>&1 || fail "train b"
$PY - "$tmp/b/model_0000001.h5" "$tmp/part.h5" <<'PY' || fail "making the partial file"
import sys, h5py, numpy as np
src, dst = sys.argv[1:3]
with h5py.File(src, "r") as f, h5py.File(dst, "w") as g:
    g.attrs["schema_version"] = np.int32(1)
    m = g.create_group("model")
    for k in f["model"]:
        if not k.startswith("roi_heads.box_predictor."):
            m.create_dataset(k, data=f["model"][k][()])
    m.create_dataset("some.other.tensor", data=np.zeros(3, np.float32))
    g.create_group("extra").create_dataset("fc.weight", data=np.zeros((2, 2), np.float32))
PY
"$M" train $COMMON --set OUTPUT_DIR="$tmp/c" --set MODEL.WEIGHTS="$tmp/part.h5" --max-steps 1 > "$tmp/c.log" 2>&1 \
    || { tail "$tmp/c.log"; fail "train from a partial MODEL.WEIGHTS"; }
grep "weights .*part.h5" "$tmp/c.log" | cut -c1-160
grep -q "part.h5: 4 tensors initialized (not in the file): roi_heads.box_predictor.cls_score.weight, roi_heads.box_predictor.cls_score.bias, roi_heads.box_predictor.bbox_pred.weight, roi_heads.box_predictor.bbox_pred.bias$" "$tmp/c.log" \
    || fail "the initialized tensors are not listed"
grep -q "part.h5: 2 datasets unused: some.other.tensor, extra/fc.weight$" "$tmp/c.log" || fail "the unused datasets are not listed"
n=$($PY -c "import h5py; print(len(h5py.File('$tmp/b/model_0000001.h5')['model']) - 4)")
grep -q "part.h5: $n tensors loaded: " "$tmp/c.log" || fail "not $n tensors loaded"
# LR 0: the step-1 checkpoint holds the initial weights
$PY - "$tmp/a/model_0000001.h5" "$tmp/b/model_0000001.h5" "$tmp/c/model_0000001.h5" <<'PY' || fail "loaded/initialized values"
import sys, h5py, numpy as np
a, b, c = (h5py.File(p, "r")["model"] for p in sys.argv[1:4])
for k in c:
    want = a[k] if k.startswith("roi_heads.box_predictor.") else b[k]
    assert np.array_equal(c[k][()], want[()]), k
print(f"{len(c)} tensors: loaded ones equal the file, initialized ones the SEED's initialization")
PY
$PY -c "
import h5py, numpy as np
with h5py.File('$tmp/none.h5', 'w') as g:
    g.attrs['schema_version'] = np.int32(1); g.create_group('model').create_dataset('x', data=np.zeros(1, np.float32))"
"$M" train $COMMON --set OUTPUT_DIR="$tmp/d" --set MODEL.WEIGHTS="$tmp/none.h5" --max-steps 1 > "$tmp/d.log" 2>&1
[ $? -eq 1 ] && grep -q "none of the model's .* parameters is in /model" "$tmp/d.log" || { tail -3 "$tmp/d.log"; fail "a file with no model tensor must fail"; }
echo PASS
