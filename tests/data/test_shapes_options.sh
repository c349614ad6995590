#!/usr/bin/env bash
# mrcnn-prep shapes' options for a harder set (bench/accuracy.sh): --classes, --objects,
# --scale, --occlusion, --empty, --crowd. The defaults written out give the default set
# byte for byte; a hard set has the classes, crowd regions (iscrowd 1, uncompressed RLE),
# images without objects, object counts and sizes asked for; it converts with --strict,
# passes inspect --check, and its export matches the source through pycocotools.
set -u -o pipefail
. "${ROOT:-$(dirname "$0")/../..}/tests/data/prep_env.sh" pycocotools

"$PREP" shapes --out "$T/d" --train 12 --val 4 --size 96x128 --seed 5 >/dev/null || fail "shapes (defaults)"
"$PREP" shapes --out "$T/e" --train 12 --val 4 --size 96x128 --seed 5 --classes 3 --objects 2:6 --scale 0.08:0.25 \
    --occlusion 0.5 --empty 0 --crowd 0 >/dev/null || fail "shapes (defaults written out)"
diff -r "$T/d" "$T/e" >/dev/null || fail "the defaults written out change the set"

H=(--train 60 --val 10 --size 320x336 --seed 3 --classes 6 --objects 3:12 --scale 0.03:0.3 --occlusion 0.7
   --empty 10 --crowd 30)
"$PREP" shapes --out "$T/h" "${H[@]}" >/dev/null || fail "shapes (hard)"
"$PREP" shapes --out "$T/h2" "${H[@]}" >/dev/null || fail "shapes (hard, again)"
diff -r "$T/h" "$T/h2" >/dev/null || fail "the hard set is not deterministic"
S=$T/h/annotations/instances_train.json
$PY_COCO - "$S" <<'PY' || fail "the hard set lacks what was asked for"
import collections, json, sys
d = json.load(open(sys.argv[1]))
cats = sorted(c["id"] for c in d["categories"])
assert cats == [1, 3, 7, 8, 10, 12], cats
per = collections.Counter(a["image_id"] for a in d["annotations"] if not a["iscrowd"])
used = collections.Counter(a["category_id"] for a in d["annotations"])
assert set(used) == set(cats), used
crowd = [a for a in d["annotations"] if a["iscrowd"]]
assert crowd and all(isinstance(a["segmentation"]["counts"], list) for a in crowd), "crowd regions"
assert len({a["image_id"] for a in crowd}) == len(crowd), "one crowd region per image at most"
with_any = {a["image_id"] for a in d["annotations"]}
empty = [im for im in d["images"] if im["id"] not in with_any]
assert 1 <= len(empty) <= 20, f"{len(empty)} images without objects"
assert max(per.values()) > 6, f"at most {max(per.values())} objects per image"
areas = sorted(a["area"] for a in d["annotations"] if not a["iscrowd"])
assert areas[0] < 400 and areas[-1] > 15000, (areas[0], areas[-1])
assert all(im["width"] == 336 and im["height"] == 320 for im in d["images"])
print(f"hard set: {len(d['images'])} images, {len(d['annotations'])} annotations, {len(crowd)} crowd, "
      f"{len(empty)} without objects, up to {max(per.values())} objects, areas {areas[0]}..{areas[-1]}")
PY
"$PREP" coco --annotations "$S" --images "$T/h/train" --out "$T/s" --shards 2 --strict > "$T/s.log" 2>&1 \
    || { cat "$T/s.log"; fail "convert the hard set with --strict"; }
grep -q "60 written of 60" "$T/s.log" || { cat "$T/s.log"; fail "not all images written"; }
"$PREP" inspect "$T/s/instances_train-index.h5" --check > "$T/check.log" 2>&1 || { cat "$T/check.log"; fail "inspect --check"; }
"$PREP" export "$T/s/instances_train-index.h5" --out "$T/x.json" >/dev/null || fail "export"
$PY_COCO "$ROOT/tests/data/coco_compare.py" "$S" "$T/x.json" | tail -1 || fail "export differs from the source (pycocotools)"

for bad in "--classes 7" "--classes 0" "--objects 5:2" "--objects 1:40" "--scale 0.3:0.1" "--scale 0:0.2" \
           "--occlusion 1" "--occlusion x" "--empty 101" "--crowd -1"; do
    # shellcheck disable=SC2086
    "$PREP" shapes --out "$T/bad" $bad > "$T/bad.log" 2>&1
    rc=$?
    [ "$rc" -ne 0 ] || fail "shapes $bad was accepted"
done
echo "ok: defaults unchanged, hard set as asked, converts, checks, exports; bad options refused"
