#!/usr/bin/env bash
# `mrcnn predict` with a briefly trained tiny model (tests/eval/infer_fixture.sh) on
# synthetic val images, one of them turned into a 150x100 PNG (a rescaling size):
#  - detections.json: COCO results plus file_name and category_name, one image_id per
#    input, scores >= --score-thresh, category ids and names of the dataset, RLE masks
#    of the input's size;
#  - one PNG per input, of the input's size, differing from the input inside the
#    masks and equal to it away from the drawings; at --score-thresh 1 equal everywhere;
#  - names "class N" without a dataset;
#  - a missing file, a text file and a truncated JPEG: exit 1 naming the file, nothing
#    written; usage errors exit 2.
set -u
cd "${ROOT:=$(cd "$(dirname "$0")/../.." && pwd)}"
BUILD=${BUILD:-build/release}
PY_COCO=${PY_COCO:-python3} PY_TORCH=${PY_TORCH:-/usr/bin/python3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$ROOT/tests/eval/infer_fixture.sh"
V=$FIX/raw/val
mapfile -t jpgs < <(ls "$V"/*.jpg | head -n 3)
"$PY_TORCH" -c "
from PIL import Image
Image.open('${jpgs[0]}').convert('RGB').resize((150, 100), Image.BILINEAR).save('$tmp/wide.png')" \
    || { echo "FAIL: making a PNG input"; exit 1; }
inputs=("$tmp/wide.png" "${jpgs[@]}")
PRED=("${CFG_ARGS[@]}" --weights "$CKPT" --set DATASETS.TEST="$FIX/shards/val-index.h5")

"$M" predict --help | grep -q -- "--score-thresh" || { echo "FAIL: --help"; exit 1; }
"$M" --help | grep -q "predict" || { echo "FAIL: mrcnn --help does not list predict"; exit 1; }
"$M" predict "${PRED[@]}" --out "$tmp/pred" --score-thresh 0.05 "${inputs[@]}" > "$tmp/pred.log" 2>&1 \
    || { echo "FAIL: predict"; cat "$tmp/pred.log"; exit 1; }
"$M" predict "${PRED[@]}" --out "$tmp/none" --score-thresh 1 "$tmp/wide.png" > "$tmp/none.log" 2>&1 \
    || { echo "FAIL: predict at --score-thresh 1"; cat "$tmp/none.log"; exit 1; }
"$M" predict "${CFG_ARGS[@]}" --weights "$CKPT" --out "$tmp/anon" --score-thresh 0.05 "${jpgs[0]}" > "$tmp/anon.log" 2>&1 \
    || { echo "FAIL: predict without a dataset"; cat "$tmp/anon.log"; exit 1; }

# masks decoded by pycocotools, pictures compared by PIL (each in the Python that has it)
"$PY_COCO" - "$tmp" "${inputs[@]}" <<'PY' || exit 1
import json, sys
import numpy as np
from pycocotools import mask as mu
d, inputs = sys.argv[1], sys.argv[2:]
dets = json.load(open(f"{d}/pred/detections.json"))
assert isinstance(dets, list) and dets, "detections.json: a non-empty list expected"
names = {1: "circle", 3: "square", 7: "triangle"}
sizes = {1: [100, 150]}
union = {}
for r in dets:
    assert set(r) == {"image_id", "file_name", "category_id", "category_name", "score", "bbox", "segmentation"}, sorted(r)
    i = r["image_id"]
    assert 1 <= i <= len(inputs) and r["file_name"] == inputs[i - 1], (i, r["file_name"])
    assert names.get(r["category_id"]) == r["category_name"], (r["category_id"], r["category_name"])
    assert 0.05 <= r["score"] <= 1 and len(r["bbox"]) == 4, r
    h, w = sizes.get(i, [128, 128])
    assert r["segmentation"]["size"] == [h, w], (i, r["segmentation"]["size"])
    x, y, bw, bh = r["bbox"]
    assert -1e-3 <= x and -1e-3 <= y and x + bw <= w + 1e-3 and y + bh <= h + 1e-3, (i, r["bbox"], w, h)
    m = mu.decode(r["segmentation"])
    union[i] = np.maximum(union.get(i, np.zeros((h, w), np.uint8)), m)
assert 1 in union, "no detection on the PNG input"
np.savez(f"{d}/union.npz", **{str(k): v for k, v in union.items()})
assert json.load(open(f"{d}/none/detections.json")) == [], "--score-thresh 1 must keep nothing"
anon = json.load(open(f"{d}/anon/detections.json"))
assert anon and all(r["category_name"] == f"class {r['category_id']}" and r["category_id"] in (1, 2, 3) for r in anon), anon[:2]
print(f"ok: detections.json: {len(dets)} results on {len(union)} of {len(inputs)} images, fields, ids, names, sizes; "
      f"'class N' without a dataset")
PY
"$PY_TORCH" - "$tmp" "${inputs[@]}" <<'PY' || exit 1
import os, sys
import numpy as np
from PIL import Image
d, inputs = sys.argv[1], sys.argv[2:]
union = dict(np.load(f"{d}/union.npz"))
pngs = sorted(f for f in os.listdir(f"{d}/pred") if f.endswith(".png"))
want = sorted(os.path.splitext(os.path.basename(p))[0] + ".png" for p in inputs)
assert pngs == want, (pngs, want)
for i, p in enumerate(inputs, 1):
    src = np.asarray(Image.open(p).convert("RGB")).astype(int)
    out = Image.open(f"{d}/pred/" + os.path.splitext(os.path.basename(p))[0] + ".png")
    assert out.mode == "RGB" and out.size == (src.shape[1], src.shape[0]), (p, out.mode, out.size)
    out = np.asarray(out).astype(int)
    m = union.get(str(i))
    if m is None:
        continue
    inside = np.abs(out - src).sum(-1)[m > 0]
    assert (inside > 0).mean() > 0.9, f"{p}: the overlay leaves {(inside == 0).mean():.0%} of the mask pixels unchanged"
    # away from the masks and the drawings (boxes, labels) the picture is the input
    ys, xs = np.nonzero(m)
    far = np.ones(m.shape, bool)
    far[max(ys.min() - 12, 0):ys.max() + 3, max(xs.min() - 3, 0):xs.max() + 3] = False
    if p.endswith(".png") and far.any():
        assert (out[far] == src[far]).all(1).mean() > 0.8, f"{p}: the overlay changed pixels far from the detections"
    print(f"ok: {os.path.basename(p)}: {out.shape[1]}x{out.shape[0]}, {(inside > 0).mean():.0%} of {m.sum()} mask pixels recoloured")
none = np.asarray(Image.open(f"{d}/none/wide.png").convert("RGB"))
assert (none == np.asarray(Image.open(f"{d}/wide.png").convert("RGB"))).all(), "nothing kept, yet the PNG differs from the input"
print("ok: with nothing kept the overlay equals the input")
PY

# bad inputs: exit 1 naming the file and the problem, nothing written
printf 'not an image\n' > "$tmp/notes.txt"
head -c 600 "${jpgs[0]}" > "$tmp/cut.jpg"
bad() { # name needle file
    "$M" predict "${PRED[@]}" --out "$tmp/bad_$1" "${jpgs[0]}" "$3" > "$tmp/bad_$1.log" 2>&1
    local rc=$?
    if [ $rc -ne 1 ] || ! grep -qF -- "$2" "$tmp/bad_$1.log" || ! grep -qF -- "$3" "$tmp/bad_$1.log" || [ -e "$tmp/bad_$1" ]; then
        echo "FAIL: $1: rc $rc (1 expected), message must name '$3' and '$2', nothing written"; cat "$tmp/bad_$1.log"; exit 1
    fi
    echo "ok: $1: $(grep -m1 "$2" "$tmp/bad_$1.log")"
}
bad missing "No such file" "$tmp/nope.jpg"
bad text "not a readable JPEG or PNG image" "$tmp/notes.txt"
bad truncated "not a readable JPEG or PNG image" "$tmp/cut.jpg"
"$M" predict "${PRED[@]}" "${jpgs[0]}" > "$tmp/noout.log" 2>&1
[ $? -eq 2 ] && grep -q -- "--out DIR is required" "$tmp/noout.log" || { echo "FAIL: no --out must exit 2"; exit 1; }
"$M" predict "${PRED[@]}" --out "$tmp/x" > "$tmp/noimg.log" 2>&1
[ $? -eq 2 ] && grep -q "no input images" "$tmp/noimg.log" || { echo "FAIL: no images must exit 2"; exit 1; }
"$M" predict "${PRED[@]}" --out "$tmp/x" --score-thresh 2 "${jpgs[0]}" > "$tmp/thr.log" 2>&1
[ $? -eq 2 ] || { echo "FAIL: --score-thresh 2 must exit 2"; exit 1; }
echo "PASS"
