#!/usr/bin/env bash
# What the converter accepts, training and evaluation accept (one rule each, shared):
#  - a box under MRCNN_MIN_BOX_SIDE (1 pixel) wide or high is skipped and counted ("box
#    under 1 pixel wide or high"), fatal under --strict; before, a bbox 1e-6 wide passed
#    ("bad input none") and made every step that sampled it non-finite;
#  - a second annotation with an id already seen is skipped and counted ("duplicate
#    annotation id"), fatal under --strict; before, it passed --strict and inspect --check
#    while `mrcnn eval --shards` and TEST.EVAL_PERIOD refused the set (mrcnn/ids.h);
#  - an image with more than 1000 valid annotations (COCO_MAX_INSTANCES_PER_IMAGE) is
#    skipped with them and counted, fatal under --strict; before, 200,000 on one image
#    converted cleanly and training was then killed for memory;
#  - `mrcnn-prep inspect --check` reports duplicate ids across the set (exit 1).
set -u -o pipefail
. "${ROOT:-$(dirname "$0")/../..}/tests/data/prep_env.sh" pycocotools

"$PREP" shapes --out "$T/a" --train 4 --val 1 --size 64x96 --seed 3 > /dev/null || fail "shapes"
I=$T/a/train
$PY_COCO - "$T/a/annotations/instances_train.json" "$T" <<'PY' || fail "making the cases"
import copy, json, sys
src, out = sys.argv[1], sys.argv[2]
d = json.load(open(src))
a0 = d["annotations"][0]
tiny = copy.deepcopy(d); t = copy.deepcopy(a0); t["id"] = 10**9; t["bbox"] = [4, 4, 1e-6, 10]; tiny["annotations"].append(t)
json.dump(tiny, open(f"{out}/tiny.json", "w"))
dup = copy.deepcopy(d); t = copy.deepcopy(d["annotations"][1]); t["id"] = a0["id"]; dup["annotations"].append(t)
json.dump(dup, open(f"{out}/dup.json", "w"))
crowd = copy.deepcopy(d); base = max(a["id"] for a in d["annotations"]) + 1
crowd["annotations"] += [dict(copy.deepcopy(a0), id=base + k) for k in range(1001)]
json.dump(crowd, open(f"{out}/crowd.json", "w"))
PY
for k in tiny dup crowd; do
    case $k in
    tiny) want="box under 1 pixel wide or high" ;;
    dup) want="duplicate annotation id" ;;
    crowd) want="image with more than 1000 annotations" ;;
    esac
    rm -rf "$T/s"
    "$PREP" coco --annotations "$T/$k.json" --images "$I" --out "$T/s" --strict --name s > "$T/s.out" 2>&1
    expect_exit "$EXIT_ERROR" $? "--strict with '$k'" || { cat "$T/s.out"; exit 1; }
    grep -q "bad input (--strict makes it fatal): $want" "$T/s.out" || { cat "$T/s.out"; fail "'$k' under --strict: no '$want'"; }
    [ -e "$T/s/s-index.h5" ] && fail "'$k': an index was written after a fatal error"
    rm -rf "$T/s"
    "$PREP" coco --annotations "$T/$k.json" --images "$I" --out "$T/s" --name s > "$T/s.out" 2>&1 || { cat "$T/s.out"; fail "'$k' non-strict failed"; }
    grep -qE "^ +1  $want\$" "$T/s.out" || { cat "$T/s.out"; fail "'$k': the summary does not count 1 '$want'"; }
    "$PREP" inspect "$T/s/s-index.h5" --check > "$T/i.out" 2>&1 || { cat "$T/i.out"; fail "'$k': inspect --check of the converted set"; }
    echo "$k: fatal under --strict, skipped and counted otherwise; the converted set checks ok"
done

# A set holding a duplicate id (as an older converter wrote it): inspect --check says so.
rm -rf "$T/s"
"$PREP" coco --annotations "$T/a/annotations/instances_train.json" --images "$I" --out "$T/s" --name s > /dev/null 2>&1 || fail "conversion"
"${PY_TORCH:-python3}" - "$T/s" <<'PY' || fail "planting a duplicate id"
import glob, h5py, sys
(f,) = [p for p in glob.glob(f"{sys.argv[1]}/s-*.h5") if not p.endswith("index.h5")]
with h5py.File(f, "r+") as h:
    ids = h["annotations/id"]
    ids[1] = ids[0]
PY
"$PREP" inspect "$T/s/s-index.h5" --check > "$T/i.out" 2>&1
rc=$?
if [ $rc -ne 1 ] || ! grep -q "1 duplicate annotation ids (id" "$T/i.out"; then
    cat "$T/i.out"; fail "inspect --check with a duplicate annotation id: exit $rc, want 1 naming it"
fi
echo "inspect --check: a duplicate annotation id fails the check"
echo "PASS: degenerate boxes and duplicate ids are refused by the converter and inspect --check"
