#!/usr/bin/env bash
# `mrcnn predict` with a briefly trained tiny model (tests/eval/infer_fixture.sh) on
# synthetic val images, one of them also turned into a 150x100 PNG (a rescaling size) and
# a 700x620 one (a short side >= 600: labels at scale 2, box outlines 2 px thick):
#  - detections.json: COCO results plus file_name and category_name, one image_id per
#    input, scores >= --score-thresh, category ids and names of the dataset, RLE masks
#    of the input's size;
#  - one PNG per input, of the input's size, exactly what its detections in
#    detections.json draw over the input (tests/eval/overlay_check.py re-renders masks,
#    boxes and labels and compares every pixel); at --score-thresh 1 equal to the input;
#  - names "class N" without a dataset;
#  - a missing file, a text file and a truncated JPEG: exit 1 naming the file, nothing
#    written; usage errors exit 2.
set -u
cd "${ROOT:=$(cd "$(dirname "$0")/../.." && pwd)}"
BUILD=${BUILD:-build/release}
PY_COCO=${PY_COCO:-python3} PY_TORCH=${PY_TORCH:-/usr/bin/python3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$ROOT/tests/common/exit_codes.sh"
. "$ROOT/tests/eval/infer_fixture.sh"
V=$FIX/raw/val
mapfile -t jpgs < <(ls "$V"/*.jpg | head -n 3)
"$PY_TORCH" -c "
from PIL import Image
im = Image.open('${jpgs[0]}').convert('RGB')
im.resize((150, 100), Image.BILINEAR).save('$tmp/wide.png')
im.resize((700, 620), Image.BILINEAR).save('$tmp/big.png')" \
    || { echo "FAIL: making the PNG inputs"; exit 1; }
inputs=("$tmp/wide.png" "${jpgs[@]}" "$tmp/big.png")
PRED=("${CFG_ARGS[@]}" --weights "$CKPT" --set DATASETS.TEST="$FIX/shards/val-index.h5")

"$M" predict --help | grep -q -- "--score-thresh" || { echo "FAIL: --help"; exit 1; }
"$M" --help | grep -q "predict" || { echo "FAIL: mrcnn --help does not list predict"; exit 1; }
"$M" predict "${PRED[@]}" --out "$tmp/pred" --score-thresh 0.05 "${inputs[@]}" > "$tmp/pred.log" 2>&1 \
    || { echo "FAIL: predict"; cat "$tmp/pred.log"; exit 1; }
# nothing drawn: the pictures as the program decodes them, the reference for the JPEGs
"$M" predict "${PRED[@]}" --out "$tmp/none" --score-thresh 1 "${inputs[@]}" > "$tmp/none.log" 2>&1 \
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
sizes = {1: [100, 150], len(inputs): [620, 700]}
masks = {}
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
    masks.setdefault(i, []).append(mu.decode(r["segmentation"]))
assert 1 in masks and len(inputs) in masks, "no detection on a PNG input"
# decoded masks, in the order of detections.json, for the overlay check
np.savez(f"{d}/pred_masks.npz", **{str(k): np.stack(v) for k, v in masks.items()})
assert json.load(open(f"{d}/none/detections.json")) == [], "--score-thresh 1 must keep nothing"
anon = json.load(open(f"{d}/anon/detections.json"))
assert anon and all(r["category_name"] == f"class {r['category_id']}" and r["category_id"] in (1, 2, 3) for r in anon), anon[:2]
np.savez(f"{d}/anon_masks.npz", **{"1": np.stack([mu.decode(r["segmentation"]) for r in anon])})
print(f"ok: detections.json: {len(dets)} results on {len(masks)} of {len(inputs)} images, fields, ids, names, sizes; "
      f"'class N' without a dataset")
PY
"$PY_TORCH" - "$tmp" "${inputs[@]}" <<'PY' || exit 1
import os, sys
import numpy as np
from PIL import Image
d, inputs = sys.argv[1], sys.argv[2:]
want = sorted(os.path.splitext(os.path.basename(p))[0] + ".png" for p in inputs)
for run in ("pred", "none"):
    pngs = sorted(f for f in os.listdir(f"{d}/{run}") if f.endswith(".png"))
    assert pngs == want, (run, pngs, want)
none = np.asarray(Image.open(f"{d}/none/wide.png").convert("RGB"))
assert (none == np.asarray(Image.open(f"{d}/wide.png").convert("RGB"))).all(), "nothing kept, yet the PNG differs from the input"
# the JPEGs as PIL decodes them: the same pictures (libjpeg builds may differ a little)
for p in inputs[1:-1]:
    a = np.asarray(Image.open(p).convert("RGB")).astype(int)
    b = np.asarray(Image.open(f"{d}/none/" + os.path.splitext(os.path.basename(p))[0] + ".png").convert("RGB")).astype(int)
    assert a.shape == b.shape and np.abs(a - b).mean() < 2, f"{p}: the picture at --score-thresh 1 is not the input"
print("ok: with nothing kept the overlay equals the input")
PY
# every pixel of the pictures: what the detections draw over the input, and nothing else
stem() { local b=${1##*/}; echo "${b%.*}"; }
triples=()
for k in "${!inputs[@]}"; do
    ref=$tmp/none/$(stem "${inputs[$k]}").png
    [ "${inputs[$k]%.png}" != "${inputs[$k]}" ] && ref=${inputs[$k]} # PNG: lossless, the input itself
    triples+=($((k + 1)) "$ref" "$tmp/pred/$(stem "${inputs[$k]}").png")
done
"$PY_TORCH" "$ROOT/tests/eval/overlay_check.py" "$ROOT/src/eval/font5x7.c" "$tmp/pred/detections.json" \
    "$tmp/pred_masks.npz" 0.05 "${triples[@]}" || exit 1
"$PY_TORCH" "$ROOT/tests/eval/overlay_check.py" "$ROOT/src/eval/font5x7.c" "$tmp/anon/detections.json" \
    "$tmp/anon_masks.npz" 0.05 1 "$tmp/none/$(stem "${jpgs[0]}").png" "$tmp/anon/$(stem "${jpgs[0]}").png" || exit 1

# bad inputs: exit 1 naming the file and the problem, nothing written
printf 'not an image\n' > "$tmp/notes.txt"
head -c 600 "${jpgs[0]}" > "$tmp/cut.jpg"
bad() { # name needle file
    "$M" predict "${PRED[@]}" --out "$tmp/bad_$1" "${jpgs[0]}" "$3" > "$tmp/bad_$1.log" 2>&1
    expect_exit "$EXIT_ERROR" $? "$1" || { cat "$tmp/bad_$1.log"; exit 1; }
    if ! grep -qF -- "$2" "$tmp/bad_$1.log" || ! grep -qF -- "$3" "$tmp/bad_$1.log" || [ -e "$tmp/bad_$1" ]; then
        echo "FAIL: $1: the message must name '$3' and '$2', nothing written"; cat "$tmp/bad_$1.log"; exit 1
    fi
    echo "ok: $1: $(grep -m1 "$2" "$tmp/bad_$1.log")"
}
bad missing "No such file" "$tmp/nope.jpg"
bad text "not a readable JPEG or PNG image" "$tmp/notes.txt"
bad truncated "not a readable JPEG or PNG image" "$tmp/cut.jpg"
usage() { # name needle args...
    local name=$1 needle=$2; shift 2
    "$M" predict "$@" > "$tmp/usage.log" 2>&1
    expect_exit "$EXIT_USAGE" $? "$name" || { cat "$tmp/usage.log"; exit 1; }
    grep -q -- "$needle" "$tmp/usage.log" || { echo "FAIL: $name: no '$needle'"; cat "$tmp/usage.log"; exit 1; }
}
usage "no --out" "--out DIR is required" "${PRED[@]}" "${jpgs[0]}"
usage "no images" "no input images" "${PRED[@]}" --out "$tmp/x"
usage "--score-thresh 2" "--score-thresh wants a number in \[0, 1\]" "${PRED[@]}" --out "$tmp/x" --score-thresh 2 "${jpgs[0]}"
[ -e "$tmp/x" ] && { echo "FAIL: a usage error wrote $tmp/x"; exit 1; }
echo "ok: usage errors exit 2"
echo "PASS"
