#!/usr/bin/env bash
# `mrcnn eval --config --weights --shards`: inference over shards with a briefly trained
# tiny model (tests/eval/infer_fixture.sh).
#  - 1, 2 and 3 ranks write the same results (sorted; 1 vs 3 byte for byte) and print
#    the same numbers;
#  - every val image is run exactly once (each has detections, none more than
#    DETECTIONS_PER_IMAGE), category ids are the dataset's (1, 3, 7), RLE sizes and boxes
#    are in the original image's pixels (also with a test size that rescales);
#  - pycocotools on the results JSON and the exported ground truth (mrcnn-prep export)
#    prints the same 12 lines, for bbox and segm, and the same stats to 1e-12;
#  - a missing checkpoint or shard index exits 1 naming it; usage errors exit 2.
set -u
cd "${ROOT:=$(cd "$(dirname "$0")/../.." && pwd)}"
BUILD=${BUILD:-build/release}
PY_COCO=${PY_COCO:-python3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
. "$ROOT/tests/common/exit_codes.sh"
. "$ROOT/tests/eval/infer_fixture.sh"
VAL=$FIX/shards/val-index.h5

"$M" eval --help | grep -q -- "--shards" || { echo "FAIL: --help does not mention --shards"; exit 1; }
"$M" eval --config "$ROOT/configs/tiny.yaml" --shards "$VAL" > "$tmp/noweights.log" 2>&1
[ $? -eq 2 ] && grep -q "no weights" "$tmp/noweights.log" || { echo "FAIL: missing weights must exit 2"; cat "$tmp/noweights.log"; exit 1; }
"$M" eval --gt x.json --weights "$CKPT" > "$tmp/mixed.log" 2>&1
[ $? -eq 2 ] && grep -q "not both" "$tmp/mixed.log" || { echo "FAIL: --gt with --weights must exit 2"; cat "$tmp/mixed.log"; exit 1; }
for bad in "--weights $tmp/none.h5 --shards $VAL" "--weights $CKPT --shards $tmp/none-index.h5"; do
    # shellcheck disable=SC2086
    mpirun --oversubscribe -np 1 "$M" eval --config "$ROOT/configs/tiny.yaml" $bad --out "$tmp/bad" > "$tmp/bad.log" 2>&1
    expect_exit "$EXIT_ERROR" $? "eval $bad" || { cat "$tmp/bad.log"; exit 1; }
    grep -q "mrcnn error.*$tmp/none" "$tmp/bad.log" || { echo "FAIL: eval $bad: the error does not name the file"; cat "$tmp/bad.log"; exit 1; }
done
echo "ok: a missing checkpoint or shard index fails naming it"

run_eval() { # np out [args...]
    local np=$1 out=$2; shift 2
    mpirun --oversubscribe -np "$np" "$M" eval "${CFG_ARGS[@]}" --weights "$CKPT" --shards "$VAL" --out "$tmp/$out" \
        --json "$tmp/$out.stats.json" "$@" > "$tmp/$out.log" 2> "$tmp/$out.err" \
        || { echo "FAIL: eval -np $np $*"; tail -20 "$tmp/$out.err"; exit 1; }
}
run_eval 1 np1
run_eval 2 np2
run_eval 3 np3 # 8 images on 3 ranks: the last step is padded
# DATASETS.TEST instead of --shards, and a test size that rescales (128 -> 192 -> 128)
mpirun --oversubscribe -np 2 "$M" eval "${CFG_ARGS[@]}" --weights "$CKPT" --set DATASETS.TEST="$VAL" \
    --set INPUT.MIN_SIZE_TEST=192 --set INPUT.MAX_SIZE_TEST=192 --out "$tmp/rescaled" --iou-type segm \
    > "$tmp/rescaled.log" 2> "$tmp/rescaled.err" || { echo "FAIL: eval at test size 192"; tail -20 "$tmp/rescaled.err"; exit 1; }
grep -q "Evaluate annotation type \*segm\*" "$tmp/rescaled.log" && ! grep -q "\*bbox\*" "$tmp/rescaled.log" \
    || { echo "FAIL: --iou-type segm"; cat "$tmp/rescaled.log"; exit 1; }
for o in np1 np2; do
    [ "$(grep -c "Average Precision" "$tmp/$o.log")" = 12 ] && [ "$(grep -c "Average Recall" "$tmp/$o.log")" = 12 ] \
        || { echo "FAIL: $o: 2 x 12 summary lines expected"; cat "$tmp/$o.log"; exit 1; }
done
summary() { grep -E "^Evaluate|^ Average" "$1"; }
cmp -s <(summary "$tmp/np1.log") <(summary "$tmp/np2.log") \
    || { echo "FAIL: 1 and 2 ranks print different numbers"; diff <(summary "$tmp/np1.log") <(summary "$tmp/np2.log"); exit 1; }
cmp -s <(summary "$tmp/np1.log") <(summary "$tmp/np3.log") \
    || { echo "FAIL: 1 and 3 ranks print different numbers"; diff <(summary "$tmp/np1.log") <(summary "$tmp/np3.log"); exit 1; }
cmp -s "$tmp/np1/coco_instances_results.json" "$tmp/np3/coco_instances_results.json" \
    || { echo "FAIL: 1 and 3 ranks write different results files"; exit 1; }
echo "ok: 1, 2 and 3 ranks print identical summaries; 1 and 3 ranks write byte-identical results"
"$P" export "$VAL" --out "$tmp/gt.json" > /dev/null || { echo "FAIL: export"; exit 1; }

"$PY_COCO" - "$tmp" <<'PY' || exit 1
import contextlib, io, json, sys
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
d = sys.argv[1]
r1 = json.load(open(f"{d}/np1/coco_instances_results.json"))
r2 = json.load(open(f"{d}/np2/coco_instances_results.json"))
key = lambda r: json.dumps(r, sort_keys=True)
assert sorted(map(key, r1)) == sorted(map(key, r2)), "1 and 2 ranks give different results"
s1, s2 = json.load(open(f"{d}/np1.stats.json")), json.load(open(f"{d}/np2.stats.json"))
assert s1 == s2, "1 and 2 ranks give different stats"
print(f"ok: 1 and 2 ranks: the same {len(r1)} results and stats")
gt = json.load(open(f"{d}/gt.json"))
ids = {im["id"] for im in gt["images"]}
per_image = {}
for r in r1:
    per_image[r["image_id"]] = per_image.get(r["image_id"], 0) + 1
assert set(per_image) == ids, f"images without results or unknown: {sorted(ids ^ set(per_image))}"
assert max(per_image.values()) <= 20, f"an image has {max(per_image.values())} results (> DETECTIONS_PER_IMAGE): run twice?"
cats = {r["category_id"] for r in r1}
assert cats <= {1, 3, 7} and cats - {1}, f"category ids {sorted(cats)} are not the dataset's 1, 3, 7"
for name in ("np1", "rescaled"):
    for r in json.load(open(f"{d}/{name}/coco_instances_results.json")):
        x, y, w, h = r["bbox"]
        assert r["segmentation"]["size"] == [128, 128], r["segmentation"]["size"]
        assert -1e-3 <= x and -1e-3 <= y and x + w <= 128 + 1e-3 and y + h <= 128 + 1e-3 and w >= 0 and h >= 0, r["bbox"]
print(f"ok: every image once ({len(ids)}), <= 20 results each, category ids {sorted(cats)}, boxes and masks at 128x128")
ours = s1
log = open(f"{d}/np1.log").read()
with contextlib.redirect_stdout(io.StringIO()):
    coco = COCO(f"{d}/gt.json")
    dets = coco.loadRes(f"{d}/np1/coco_instances_results.json")
for t in ("bbox", "segm"):
    e = COCOeval(coco, dets, t)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        e.evaluate(); e.accumulate(); e.summarize()
    lines = [l for l in buf.getvalue().splitlines() if l.startswith(" Average")]
    block = log.split(f"*{t}*")[1].splitlines()[1:13]
    assert lines == block, f"{t}: pycocotools prints\n" + "\n".join(lines) + "\nwe print\n" + "\n".join(block)
    diff = max(abs(a - b) for a, b in zip(e.stats, ours[t]["stats"]))
    assert diff <= 1e-12, f"{t}: stats differ from pycocotools by {diff}"
    print(f"ok: {t}: pycocotools prints the same 12 lines, stats within {diff:.1e} (AP {e.stats[0]:.3f})")
PY
echo "PASS"
